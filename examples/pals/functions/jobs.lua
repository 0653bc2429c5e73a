-- Jobs of the pals app: the journeys check run every minute by cron, and demo data for a fresh
-- server.
local u = require("lib.util")
local pals = require("lib.pals")
local journeys = require("lib.journeys")
local MASTER = pals.MASTER

-- checkJourneys: journeys under way whose ETA passed become overdue (once), even when their
-- traveller sends no more locations.
cloud.job("checkJourneys", function(req)
  local now = time.now()
  local marked = 0
  local late = db.find("Journey", {status = {["$in"] = {"active", "stuck"}}, overdueNotified = false,
    eta = {["$lt"] = u.date(now)}}, {master = true, limit = 10000, order = "eta"})
  for _, j in ipairs(late) do
    db.transaction(function()
      local fresh = db.get("Journey", j.objectId, MASTER)
      if fresh and fresh.status ~= "arrived" and fresh.status ~= "stopped" then
        if journeys.checkOverdue(fresh, now).overdueNotified and not fresh.overdueNotified then marked = marked + 1 end
      end
    end)
  end
  return {overdue = marked}
end)

local DEMO_PASSWORD = "moonbase-demo"
local PEOPLE = {
  {"ada", 45.4642, 9.1900}, {"ben", 45.4700, 9.1850}, {"cleo", 45.4580, 9.1820}, {"dev", 45.4811, 9.2050},
}

-- seedDemo: four users (password "moonbase-demo"), two groups, shared locations, a chat, a journey
-- under way. Does nothing on a server that already has groups.
cloud.job("seedDemo", function(req)
  if db.count("Group", {}, MASTER) > 0 then return "skipped: the server already has groups" end
  local ids = {}
  for i, p in ipairs(PEOPLE) do
    local user = db.first("_User", {username = p[1]}, {master = true, keys = "objectId"})
    ids[i] = user and user.objectId or db.create("_User", {username = p[1], password = DEMO_PASSWORD,
      email = p[1] .. "@demo.moonbase.test"}, MASTER).objectId
  end
  req.progress(0.3, "users ready")
  local function group(name, members)
    local g = db.create("Group", {name = name, createdBy = u.user(ids[members[1]]), memberCount = #members,
      ACL = {[ids[members[1]]] = {read = true}}}, MASTER)
    local ptrs = {}
    for i, m in ipairs(members) do ptrs[i] = u.user(ids[m]) end
    db.create("_Role", {name = pals.roleName(g.objectId), ACL = pals.groupReadACL(g.objectId),
      users = {__op = "AddRelation", objects = ptrs}}, MASTER)
    for _, m in ipairs(members) do db.create("Membership", {group = u.ptr("Group", g.objectId), user = u.user(ids[m])}, MASTER) end
    db.update("Group", g.objectId, {ACL = pals.groupReadACL(g.objectId)}, MASTER)
    return g.objectId
  end
  local family = group("Family", {1, 2, 3})
  local climbing = group("Climbing club", {1, 4})
  local now = time.now()
  for i, p in ipairs(PEOPLE) do
    local sharing = i == 4 and {climbing} or (i == 1 and {family, climbing} or {family})
    local s = pals.state(ids[i])
    db.update("MemberState", s.objectId, {state = "Active", location = {__type = "GeoPoint", latitude = p[2], longitude = p[3]},
      accuracy = 10, lastSeen = u.date(now), sharingWith = sharing, ACL = pals.stateACL(ids[i], sharing)}, MASTER)
  end
  for _, m in ipairs({{1, "Dinner at eight?"}, {2, "Yes, I'll bring dessert"}, {3, "On my way after work"}}) do
    db.create("ChatMessage", {group = u.ptr("Group", family), author = u.user(ids[m[1]]), kind = "text", text = m[2],
      ACL = pals.groupReadACL(family)}, MASTER)
  end
  req.progress(0.7, "groups and chat ready")
  local s = pals.state(ids[3])
  local j = db.create("Journey", {user = u.user(ids[3]), group = u.ptr("Group", family),
    destination = {__type = "GeoPoint", latitude = 45.4642, longitude = 9.1900}, eta = u.date(now + 45 * 60000),
    status = "active", startedAt = u.date(now), anchor = s.location, anchorAt = u.date(now),
    overdueNotified = false, stuckNotified = false,
    ACL = {[ids[3]] = {read = true}, ["role:" .. pals.roleName(family)] = {read = true}}}, MASTER)
  db.update("MemberState", s.objectId, {state = "Routing"}, MASTER)
  journeys.point(ids[3], s.sharingWith, "journey", j.objectId, s.location, now)
  return {users = #PEOPLE, groups = 2, messages = 3, journeys = 1}
end)
