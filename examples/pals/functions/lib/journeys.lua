-- The journey state machine, shared by updateLocation and the checkJourneys job.
--   active → arrived   a location within ARRIVAL_M of the destination (state back to Active)
--   → overdue          the ETA passed before arrival (once per journey)
--   → stuck            no movement beyond MOVE_M for STUCK_MINUTES (once per journey)
-- Each transition notifies the other members of the journey's group. An overdue or stuck journey
-- is still under way: it can arrive or be stopped.
local u = require("lib.util")
local pals = require("lib.pals")
local M = {}

M.ARRIVAL_M = 50
M.MOVE_M = 50
M.STUCK_MINUTES = 10

-- Appends a point of the user's path, readable by the groups that may see the user's state.
function M.point(userId, sharingWith, kind, journeyId, loc, now)
  local p = {user = u.user(userId), kind = kind, location = loc, at = u.date(now), ACL = pals.stateACL(userId, sharingWith)}
  if journeyId then p.journey = u.ptr("Journey", journeyId) end
  return db.create("PathPoint", p, pals.MASTER)
end

local function tell(j, kind)
  local gid = j.group.objectId
  pals.notify(pals.othersIn(gid, j.user.objectId), kind, gid, j.user.objectId, {journey = u.ptr("Journey", j.objectId)})
end

-- Marks the journey overdue if its ETA passed and it was not marked before; returns the journey.
function M.checkOverdue(j, now)
  if j.overdueNotified or now <= (u.millis(j.eta) or math.maxinteger) then return j end
  j = db.update("Journey", j.objectId, {status = "overdue", overdueNotified = true}, pals.MASTER)
  tell(j, "journeyOverdue")
  return j
end

-- Applies a new location to a journey under way; returns the journey as stored.
function M.advance(j, loc, now)
  if u.metres(loc, j.destination) <= M.ARRIVAL_M then
    j = db.update("Journey", j.objectId, {status = "arrived", endedAt = u.date(now)}, pals.MASTER)
    tell(j, "journeyArrived")
    return j
  end
  j = M.checkOverdue(j, now)
  if not u.isGeoPoint(j.anchor) or u.metres(loc, j.anchor) > M.MOVE_M then
    -- Moved: the stuck timer starts again from here.
    return db.update("Journey", j.objectId, {anchor = loc, anchorAt = u.date(now)}, pals.MASTER)
  end
  local since = u.millis(j.anchorAt) or now
  if not j.stuckNotified and now - since >= M.STUCK_MINUTES * u.minuteMs() then
    j = db.update("Journey", j.objectId, {status = "stuck", stuckNotified = true}, pals.MASTER)
    tell(j, "journeyStuck")
  end
  return j
end

return M
