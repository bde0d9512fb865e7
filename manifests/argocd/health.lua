-- Argo CD health check for sunksandbox.dev/SunkSandboxBinding.
-- Shipped to Argo CD as argocd-cm key
--   resource.customizations.health.sunksandbox.dev_SunkSandboxBinding
-- by manifests/argocd/ (a verbatim copy of this file; a unit test keeps them equal).
--
-- Healthy:     Ready=True, and the operator has observed the current metadata.generation
--              (Ready's observedGeneration, else status.observedGeneration).
-- Progressing: no status yet, status older than the current generation, Ready missing or
--              Unknown, or the binding is being deleted (policy restore in progress).
-- Degraded:    Ready=False (current generation); message "<reason>: <message>".
-- Suspended:   the annotation sunksandbox.dev/paused is "true" (the operator writes nothing for it);
--              Progressing while the operator has not yet resumed one whose annotation is gone.
hs = {}

local function describe(cond, fallback)
  local reason = cond.reason
  local message = cond.message
  if reason ~= nil and reason ~= "" and message ~= nil and message ~= "" then
    return tostring(reason) .. ": " .. tostring(message)
  end
  if message ~= nil and message ~= "" then
    return tostring(message)
  end
  if reason ~= nil and reason ~= "" then
    return tostring(reason)
  end
  return fallback
end

local generation = nil
if obj.metadata ~= nil then
  generation = obj.metadata.generation
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Being deleted: the operator is restoring what it changed (deletionPolicy)"
  return hs
end

local annotations = nil
if obj.metadata ~= nil then
  annotations = obj.metadata.annotations
end
local paused = annotations ~= nil and annotations["sunksandbox.dev/paused"] == "true"

local function find_ready()
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  local found = nil
  for _, cond in ipairs(obj.status.conditions) do
    if cond.type == "Ready" then
      found = cond
    end
  end
  return found
end

if paused then
  hs.status = "Suspended"
  local acknowledged = find_ready()
  if acknowledged ~= nil and acknowledged.reason == "Paused" then
    hs.message = describe(acknowledged, "Paused")
  else
    hs.message = "Paused by the sunksandbox.dev/paused annotation; waiting for the operator to acknowledge"
  end
  return hs
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local ready = find_ready()

if ready ~= nil and ready.reason == "Paused" then
  hs.status = "Progressing"
  hs.message = "Resuming: the pause annotation was removed; waiting for the operator to reconcile"
  return hs
end

local observed = obj.status.observedGeneration
if ready ~= nil and ready.observedGeneration ~= nil then
  observed = ready.observedGeneration
end

if generation ~= nil and (observed == nil or observed ~= generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  if observed ~= nil then
    hs.message = hs.message .. " (status is for generation " .. tostring(observed) .. ")"
  end
  return hs
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end

if ready.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(ready, "Not ready")
  return hs
end

hs.status = "Progressing"
hs.message = describe(ready, "Ready is Unknown")
return hs
