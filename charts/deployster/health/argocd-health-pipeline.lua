-- Argo CD health check for deployster.io/Pipeline (resource.customizations.health.deployster.io_Pipeline).
-- It reads what the Deployster controller writes: the Ready and Stalled conditions and
-- status.observedGeneration. Healthy: the spec's revision is through every stage. Degraded: a
-- step failed, or the pipeline is invalid. Progressing: on its way, or waiting for a gate.
local hs = {}

local function condition(conditions, type)
  for _, c in ipairs(conditions or {}) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to drive it"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "The spec changed: waiting for the controller"
  return hs
end

local ready = condition(status.conditions, "Ready")
local stalled = condition(status.conditions, "Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message or stalled.reason
  return hs
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to drive it"
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
elseif ready.reason == "StepFailed" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
hs.message = ready.message or ready.reason
return hs
