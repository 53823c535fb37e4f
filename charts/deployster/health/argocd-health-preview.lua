-- Argo CD health check for deployster.io/ManifestPreview
-- (resource.customizations.health.deployster.io_ManifestPreview). Healthy: planned (the plan is
-- in status.plan; its summary is the message). Degraded: the proposal could not be planned.
-- Progressing: waiting for the controller, or for a slot (at most 4 plan at once per namespace).
local hs = {}
local status = obj.status
local generation = obj.metadata and obj.metadata.generation
if status == nil or status.conditions == nil or
    (generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation)) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to plan it"
  return hs
end
local ready = nil
for _, c in ipairs(status.conditions) do
  if c.type == "Ready" then
    ready = c
  end
end
if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
elseif ready.status == "True" then
  hs.status = "Healthy"
else
  hs.status = "Degraded"
end
hs.message = (ready and (ready.message or ready.reason)) or "Waiting for the controller to plan it"
return hs
