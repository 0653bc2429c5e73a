-- Live location, SOS, journeys and presence. A user's MemberState is readable by the roles of the
-- groups in its `sharingWith`: sharing is the ACL, so REST reads and realtime events follow it.
local u = require("lib.util")
local pals = require("lib.pals")
local journeys = require("lib.journeys")
local MASTER = pals.MASTER

------------------------------------------------------------------------ sharing

local function sharingChange(req, adding)
  local groupId = u.idParam(req.params or {}, "groupId")
  pals.groupOr101(req, groupId)
  local me = req.user.objectId
  return db.transaction(function()
    local s = pals.state(me)
    local list = pals.without(s.sharingWith, groupId)
    if adding then list[#list + 1] = groupId end
    return pals.setSharing(me, list)
  end)
end

-- startSharing {groupId} / stopSharing {groupId} -> the caller's MemberState.
cloud.define("startSharing", {requireUser = true}, function(req) return sharingChange(req, true) end)
cloud.define("stopSharing", {requireUser = true}, function(req) return sharingChange(req, false) end)

-- myState -> the caller's MemberState.
cloud.define("myState", {requireUser = true}, function(req) return pals.state(req.user.objectId) end)

------------------------------------------------------------------------ location

-- updateLocation {location, accuracy?} -> {state, journey?}. State Active unless SOS or Routing; a
-- PathPoint in SOS and on a journey; the journey's arrival, overdue and stuck rules.
cloud.define("updateLocation", {requireUser = true}, function(req)
  local p = req.params or {}
  local loc = u.geoParam(p, "location")
  if u.present(p.accuracy) and (type(p.accuracy) ~= "number" or p.accuracy < 0 or p.accuracy > 1e6) then
    u.fail(cloud.codes.VALIDATION_ERROR, "accuracy must be a number of metres")
  end
  local me = req.user.objectId
  return db.transaction(function()
    local now = time.now()
    local s = pals.state(me)
    local changes = {location = loc, lastSeen = u.date(now)}
    if u.present(p.accuracy) then changes.accuracy = p.accuracy end
    if s.state ~= "SOS" and s.state ~= "Routing" then changes.state = "Active" end
    if s.state == "SOS" then journeys.point(me, s.sharingWith, "sos", nil, loc, now) end
    local j = pals.currentJourney(me)
    if j then
      journeys.point(me, s.sharingWith, "journey", j.objectId, loc, now)
      j = journeys.advance(j, loc, now)
      if j.status == "arrived" and s.state == "Routing" then changes.state = "Active" end
    end
    s = db.update("MemberState", s.objectId, changes, MASTER)
    return {state = s.state, journey = j or json.null}
  end)
end)

------------------------------------------------------------------------ SOS

-- Everyone who shares a group with the user.
local function everyoneAround(userId)
  local out = {}
  for _, gid in ipairs(pals.groupIdsOf(userId)) do
    for _, id in ipairs(pals.othersIn(gid, userId)) do out[#out + 1] = {id, gid} end
  end
  return out
end

local function notifyAround(userId, kind)
  for _, pair in ipairs(everyoneAround(userId)) do pals.notify({pair[1]}, kind, pair[2], userId) end
end

-- triggerSOS {location} -> the MemberState in SOS; already in SOS → 142.
cloud.define("triggerSOS", {requireUser = true}, function(req)
  local loc = u.geoParam(req.params or {}, "location")
  local me = req.user.objectId
  return db.transaction(function()
    local now = time.now()
    local s = pals.state(me)
    if s.state == "SOS" then u.fail(cloud.codes.VALIDATION_ERROR, "already in SOS") end
    s = db.update("MemberState", s.objectId, {state = "SOS", sosStartedAt = u.date(now), location = loc,
      lastSeen = u.date(now)}, MASTER)
    journeys.point(me, s.sharingWith, "sos", nil, loc, now)
    notifyAround(me, "sos")
    return s
  end)
end)

-- stopSOS -> the MemberState, Active again (Routing when a journey is still under way); not in SOS → 142.
cloud.define("stopSOS", {requireUser = true}, function(req)
  local me = req.user.objectId
  return db.transaction(function()
    local s = pals.state(me)
    if s.state ~= "SOS" then u.fail(cloud.codes.VALIDATION_ERROR, "not in SOS") end
    s = db.update("MemberState", s.objectId, {state = pals.currentJourney(me) and "Routing" or "Active",
      sosStartedAt = {__op = "Delete"}}, MASTER)
    notifyAround(me, "sosStopped")
    return s
  end)
end)

------------------------------------------------------------------------ journeys

-- startJourney {groupId, destination, etaMinutes (1-1440)} -> the Journey; one at a time → 142.
cloud.define("startJourney", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId = u.idParam(p, "groupId")
  local dest = u.geoParam(p, "destination")
  local minutes = u.intParam(p, "etaMinutes", nil, 1, 1440)
  pals.groupOr101(req, groupId)
  local me = req.user.objectId
  return db.transaction(function()
    if pals.currentJourney(me) then u.fail(cloud.codes.VALIDATION_ERROR, "a journey is already under way: stop it first") end
    local now = time.now()
    local s = pals.state(me)
    local j = db.create("Journey", {user = u.user(me), group = u.ptr("Group", groupId), destination = dest,
      eta = u.date(now + minutes * u.minuteMs()), status = "active", startedAt = u.date(now),
      anchor = s.location, anchorAt = u.date(now), overdueNotified = false, stuckNotified = false,
      ACL = {[me] = {read = true}, ["role:" .. pals.roleName(groupId)] = {read = true}}}, MASTER)
    if s.state ~= "SOS" then db.update("MemberState", s.objectId, {state = "Routing"}, MASTER) end
    pals.notify(pals.othersIn(groupId, me), "journeyStarted", groupId, me, {journey = u.ptr("Journey", j.objectId)})
    return j
  end)
end)

-- stopJourney -> the stopped Journey; none under way → 142.
cloud.define("stopJourney", {requireUser = true}, function(req)
  local me = req.user.objectId
  return db.transaction(function()
    local j = pals.currentJourney(me)
    if not j then u.fail(cloud.codes.VALIDATION_ERROR, "no journey under way") end
    j = db.update("Journey", j.objectId, {status = "stopped", endedAt = u.date(time.now())}, MASTER)
    local s = pals.state(me)
    if s.state == "Routing" then db.update("MemberState", s.objectId, {state = "Active"}, MASTER) end
    pals.notify(pals.othersIn(j.group.objectId, me), "journeyStopped", j.group.objectId, me,
      {journey = u.ptr("Journey", j.objectId)})
    return j
  end)
end)

-- memberPath {groupId, userId} -> the points of the member's current SOS or journey, oldest first,
-- when the member shares with this group (119 otherwise).
cloud.define("memberPath", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId, userId = u.idParam(p, "groupId"), u.idParam(p, "userId")
  pals.groupOr101(req, groupId)
  pals.memberOr(groupId, userId)
  local s = pals.state(userId)
  if userId ~= req.user.objectId and not pals.contains(s.sharingWith, groupId) then
    u.fail(cloud.codes.OPERATION_FORBIDDEN, "this member does not share with this group")
  end
  local where
  if s.state == "SOS" then
    where = {user = u.user(userId), kind = "sos", at = {["$gte"] = s.sosStartedAt}}
  else
    local j = pals.currentJourney(userId)
    if not j then return json.array() end
    where = {journey = u.ptr("Journey", j.objectId)}
  end
  return u.list(db.find("PathPoint", where, {master = true, order = "at", limit = 10000, keys = "kind,location,at,journey,user"}))
end)

------------------------------------------------------------------------ presence

-- Online at a user's first realtime connection, offline at the last disconnect: a counter per
-- user changed atomically, so connections racing on several workers agree on first and last.
cloud.onLiveQueryEvent(function(req)
  if not req.user or (req.event ~= "connect" and req.event ~= "disconnect") then return end
  local me = req.user.objectId
  db.transaction(function()
    local s = pals.state(me)
    local delta = req.event == "connect" and 1 or -1
    s = db.update("MemberState", s.objectId, {connections = {__op = "Increment", amount = delta}}, MASTER)
    local event
    if req.event == "connect" and s.connections == 1 then event = "online" end
    if req.event == "disconnect" and s.connections <= 0 then event = "offline" end
    if not event then return end
    local fix = {online = event == "online", lastSeen = u.date(time.now())}
    if s.connections < 0 then fix.connections = 0 end
    db.update("MemberState", s.objectId, fix, MASTER)
    for _, gid in ipairs(pals.groupIdsOf(me)) do pals.systemMessage(gid, event, me) end
  end)
end)
