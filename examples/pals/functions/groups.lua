-- Groups, members and chat. Each group has a role `group-<id>` whose `users` are its members;
-- every object of a group is readable through that role, so membership is the only key.
local u = require("lib.util")
local pals = require("lib.pals")
local MASTER = pals.MASTER

------------------------------------------------------------------------ declarations

cloud.index("Membership", {"group", "user"}, {unique = true})
cloud.index("Membership", {"user"})
cloud.index("MemberState", {"user"}, {unique = true})
cloud.index("ChatMessage", {"group", "createdAt"})
cloud.index("Notification", {"recipient", "createdAt"})
cloud.index("Journey", {"user", "status"})
cloud.index("PathPoint", {"user", "at"})
cloud.index("PathPoint", {"journey", "at"})

-- Clients read through ACLs; every write goes through the functions (master key inside).
local closed = {create = {}, update = {}, delete = {}, addField = {}}
for _, cls in ipairs({"Group", "MemberState", "Journey", "PathPoint", "ChatMessage", "Notification"}) do
  cloud.classPermissions(cls, closed)
end
-- Memberships are the app's index of who is in which group: master only.
cloud.classPermissions("Membership", {find = {}, get = {}, count = {}, create = {}, update = {}, delete = {}, addField = {}})
-- Roles are made by createGroup only.
cloud.classPermissions("_Role", {create = {}, update = {}, delete = {}, addField = {}})

local function add(groupId, userId)
  local role = pals.role(groupId)
  db.update("_Role", role.objectId, {users = {__op = "AddRelation", objects = {u.user(userId)}}}, MASTER)
  db.create("Membership", {group = u.ptr("Group", groupId), user = u.user(userId)}, MASTER)
  pals.state(userId)
end

local function withCount(g)
  g.memberCount = db.count("Membership", {group = u.ptr("Group", g.objectId)}, MASTER)
  return g
end

------------------------------------------------------------------------ groups

-- createGroup {name} -> the group; the caller is its first member.
cloud.define("createGroup", {requireUser = true}, function(req)
  local name = u.textParam(req.params or {}, "name", 60)
  local me = req.user.objectId
  return db.transaction(function()
    -- Readable by its creator until the role exists (the id names the role), never by anyone else.
    local g = db.create("Group", {name = name, createdBy = u.user(me), memberCount = 1,
      ACL = {[me] = {read = true}}}, MASTER)
    db.create("_Role", {name = pals.roleName(g.objectId), ACL = pals.groupReadACL(g.objectId),
      users = {__op = "AddRelation", objects = {u.user(me)}}}, MASTER)
    db.create("Membership", {group = u.ptr("Group", g.objectId), user = u.user(me)}, MASTER)
    pals.state(me)
    return db.update("Group", g.objectId, {ACL = pals.groupReadACL(g.objectId)}, MASTER)
  end)
end)

-- addMember {groupId, email}: unknown email → 101, already a member → 137; both get memberAdded.
cloud.define("addMember", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId = u.idParam(p, "groupId")
  if type(p.email) ~= "string" or not p.email:find("^[^@%s]+@[^@%s]+$") then u.fail(cloud.codes.VALIDATION_ERROR, "email is required") end
  pals.groupOr101(req, groupId)
  local me = req.user.objectId
  return db.transaction(function()
    local target = db.first("_User", {email = p.email}, {master = true, keys = "username"})
      or db.first("_User", {email = p.email:lower()}, {master = true, keys = "username"})
    if not target then u.fail(cloud.codes.OBJECT_NOT_FOUND, "no user with this email") end
    if pals.isMember(groupId, target.objectId) then u.fail(cloud.codes.DUPLICATE_VALUE, "already a member") end
    add(groupId, target.objectId)
    local g = db.update("Group", groupId, {memberCount = {__op = "Increment", amount = 1}}, MASTER)
    pals.systemMessage(groupId, "joined", target.objectId)
    pals.notify({target.objectId, me}, "memberAdded", groupId, me, {member = u.user(target.objectId)})
    return {group = g, member = {objectId = target.objectId, username = target.username}}
  end)
end)

-- removeMember {groupId, userId}: the caller and the target must both be members.
cloud.define("removeMember", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId, userId = u.idParam(p, "groupId"), u.idParam(p, "userId")
  pals.groupOr101(req, groupId)
  return db.transaction(function()
    pals.memberOr(groupId, userId)
    local deleted = pals.removeFromGroup(groupId, userId, userId == req.user.objectId and "left" or "removed")
    return {removed = userId, groupDeleted = deleted}
  end)
end)

-- leaveGroup {groupId}: the last member leaving deletes the group and all its data.
cloud.define("leaveGroup", {requireUser = true}, function(req)
  local groupId = u.idParam(req.params or {}, "groupId")
  pals.groupOr101(req, groupId)
  return db.transaction(function()
    return {left = groupId, groupDeleted = pals.removeFromGroup(groupId, req.user.objectId, "left")}
  end)
end)

-- renameGroup {groupId, name}: members only.
cloud.define("renameGroup", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId = u.idParam(p, "groupId")
  local name = u.textParam(p, "name", 60)
  pals.groupOr101(req, groupId)
  return db.update("Group", groupId, {name = name}, MASTER)
end)

-- myGroups -> the caller's groups (the role's ACL finds exactly them) with member counts.
cloud.define("myGroups", {requireUser = true}, function(req)
  local out = {}
  for _, g in ipairs(db.find("Group", {}, {order = "name", limit = 1000})) do out[#out + 1] = withCount(g) end
  return u.list(out)
end)

-- groupMembers {groupId} -> members with username; state, location and lastSeen for those sharing
-- with this group.
cloud.define("groupMembers", {requireUser = true}, function(req)
  local groupId = u.idParam(req.params or {}, "groupId")
  pals.groupOr101(req, groupId)
  local ids = pals.memberIds(groupId)
  local users, states = {}, {}
  for _, user in ipairs(db.find("_User", {objectId = {["$in"] = ids}}, {master = true, keys = "username", limit = 10000})) do
    users[user.objectId] = user
  end
  local ptrs = {}
  for i, id in ipairs(ids) do ptrs[i] = u.user(id) end
  for _, s in ipairs(db.find("MemberState", {user = {["$in"] = ptrs}}, {master = true, limit = 10000})) do
    states[s.user.objectId] = s
  end
  local out = {}
  for _, id in ipairs(ids) do
    local m = {objectId = id, username = users[id] and users[id].username, sharing = false}
    local s = states[id]
    if s then
      m.online = s.online == true
      if pals.contains(s.sharingWith, groupId) then
        m.sharing, m.state, m.location, m.accuracy, m.lastSeen = true, s.state, s.location, s.accuracy, s.lastSeen
      end
    end
    out[#out + 1] = m
  end
  return u.list(out)
end)

------------------------------------------------------------------------ chat

-- sendMessage {groupId, text} -> the ChatMessage (kind text, author the caller); members only.
cloud.define("sendMessage", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId = u.idParam(p, "groupId")
  local text = u.textParam(p, "text", 2000)
  pals.groupOr101(req, groupId)
  return db.create("ChatMessage", {group = u.ptr("Group", groupId), author = u.user(req.user.objectId), kind = "text",
    text = text, ACL = pals.groupReadACL(groupId)}, MASTER)
end)

-- chatHistory {groupId, before?, limit = 50} -> messages newest first; `before` (a Date or an ISO
-- string, usually the createdAt of the oldest message shown) pages back.
cloud.define("chatHistory", {requireUser = true}, function(req)
  local p = req.params or {}
  local groupId = u.idParam(p, "groupId")
  local limit = u.intParam(p, "limit", 50, 1, 1000)
  local where = {group = u.ptr("Group", groupId)}
  if u.present(p.before) then
    local ms = u.millis(p.before)
    if not ms then u.fail(cloud.codes.VALIDATION_ERROR, "before must be a Date") end
    where.createdAt = {["$lt"] = u.date(ms)}
  end
  pals.groupOr101(req, groupId)
  return u.list(db.find("ChatMessage", where, {order = "-createdAt", limit = limit}))
end)

------------------------------------------------------------------------ notifications

-- myNotifications {unreadOnly?, limit = 50} -> the caller's notifications, newest first.
cloud.define("myNotifications", {requireUser = true}, function(req)
  local p = req.params or {}
  local where = {recipient = u.user(req.user.objectId)}
  if p.unreadOnly == true then where.read = false end
  return u.list(db.find("Notification", where, {order = "-createdAt", limit = u.intParam(p, "limit", 50, 1, 1000)}))
end)

-- markNotificationsRead {ids?} -> {updated}: the given notifications of the caller (all when no ids).
cloud.define("markNotificationsRead", {requireUser = true}, function(req)
  local p = req.params or {}
  local where = {recipient = u.user(req.user.objectId), read = false}
  if u.present(p.ids) then
    if type(p.ids) ~= "table" then u.fail(cloud.codes.VALIDATION_ERROR, "ids must be an array of ids") end
    where.objectId = {["$in"] = p.ids}
  end
  return {updated = db.updateWhere("Notification", where, {read = true}, {master = true, triggers = false})}
end)
