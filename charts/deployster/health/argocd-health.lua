-- Argo CD health check for deployster.io/Manifest (resource.customizations.health.deployster.io_Manifest).
-- It reads what the Deployster controller writes: the Ready, Reconciling and Stalled conditions,
-- status.observedGeneration, status.progress, and spec.suspend.
local hs = {}

local function condition(conditions, type)
  for _, c in ipairs(conditions or {}) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

if obj.spec ~= nil and obj.spec.suspend == true then
  hs.status = "Suspended"
  hs.message = "spec.suspend is true: the controller runs nothing"
  return hs
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller's first pass"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "The spec changed: waiting for a pass over it"
  return hs
end

local ready = condition(status.conditions, "Ready")
local reconciling = condition(status.conditions, "Reconciling")
local stalled = condition(status.conditions, "Stalled")

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = message(stalled, "Stalled: " .. (stalled.reason or ""))
  return hs
end

if ready ~= nil and ready.status == "False" and ready.reason == "AwaitingApproval" then
  hs.status = "Suspended"
  hs.message = message(ready, "A plan awaits approval")
  return hs
end

-- A pass that would delete more than the Manifest allows waits for a person, as an approval does.
if ready ~= nil and ready.status == "False" and ready.reason == "DeletionGuarded" then
  hs.status = "Suspended"
  hs.message = message(ready, "Deletions await acknowledgement")
  return hs
end

if status.progress ~= nil and status.progress ~= "" then
  hs.status = "Progressing"
  hs.message = "Applying: " .. status.progress
  return hs
end

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message(ready, "All resources VALID")
  return hs
end

if reconciling ~= nil and reconciling.status == "True" and reconciling.reason == "RetryingAfterFailure" then
  hs.status = "Degraded"
  hs.message = message(ready, message(reconciling, "A pass failed; retrying"))
  return hs
end

hs.status = "Progressing"
hs.message = message(ready, message(reconciling, "Reconciling"))
return hs
