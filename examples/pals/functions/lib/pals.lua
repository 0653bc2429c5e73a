-- The model of the pals app, shared by its files: groups and their roles, memberships, member
-- states and their ACLs, notifications and system chat messages. Every write here uses the
-- master key: clients change data only through the functions, which check membership first.
local u = require("lib.util")
local M = {}

M.MASTER = {master = true}
M.ACTIVE_JOURNEY = {["$in"] = {"active", "overdue", "stuck"}}   -- a journey still under way

function M.roleName(groupId) return "group-" .. groupId end

function M.groupReadACL(groupId) return {["role:" .. M.roleName(groupId)] = {read = true}} end

-- The group as the caller sees it: nil unless the caller is a member (the group's ACL grants read
-- to its role only), so a stranger cannot tell a foreign group from a missing one.
function M.groupOr101(req, groupId)
  local g = db.get("Group", groupId)
  if not g then u.fail(cloud.codes.OBJECT_NOT_FOUND, "no group " .. groupId) end
  return g
end

function M.role(groupId)
  return db.first("_Role", {name = M.roleName(groupId)}, M.MASTER)
end

-- 101 for a user id that does not exist, 119 for a user who is not a member of the group.
function M.memberOr(groupId, userId)
  if not db.get("_User", userId, {master = true, keys = "objectId"}) then u.fail(cloud.codes.OBJECT_NOT_FOUND, "no user " .. userId) end
  if not M.isMember(groupId, userId) then u.fail(cloud.codes.OPERATION_FORBIDDEN, "not a member of this group") end
end

function M.isMember(groupId, userId)
  return db.count("Membership", {group = u.ptr("Group", groupId), user = u.user(userId)}, M.MASTER) > 0
end

-- Member user ids of a group, oldest membership first.
function M.memberIds(groupId)
  local out = {}
  for _, m in ipairs(db.find("Membership", {group = u.ptr("Group", groupId)}, {master = true, order = "createdAt", limit = 10000})) do
    out[#out + 1] = m.user.objectId
  end
  return out
end

-- Group ids the user belongs to.
function M.groupIdsOf(userId)
  local out = {}
  for _, m in ipairs(db.find("Membership", {user = u.user(userId)}, {master = true, limit = 10000})) do
    out[#out + 1] = m.group.objectId
  end
  return out
end

-- The ACL of a user's state and path points: the user, and the role of each group shared with.
function M.stateACL(userId, sharingWith)
  local acl = {[userId] = {read = true}}
  for _, gid in ipairs(sharingWith or {}) do acl["role:" .. M.roleName(gid)] = {read = true} end
  return acl
end

-- The user's MemberState, created (inactive, sharing with nobody) on first use.
function M.state(userId)
  local s = db.first("MemberState", {user = u.user(userId)}, M.MASTER)
  if s then return s end
  local ok, created = pcall(db.create, "MemberState", {user = u.user(userId), state = "Inactive", sharingWith = json.array(),
    online = false, connections = 0, ACL = M.stateACL(userId, {})}, M.MASTER)
  if ok then return created end
  -- Another call created it first (the unique index on user): use that one.
  return db.first("MemberState", {user = u.user(userId)}, M.MASTER)
end

-- Sets the groups the user shares with, and with them the ACL of the state and of the path points:
-- a group taken off stops seeing both at the next read or realtime event.
function M.setSharing(userId, sharingWith)
  local s = M.state(userId)
  local acl = M.stateACL(userId, sharingWith)
  db.updateWhere("PathPoint", {user = u.user(userId)}, {ACL = acl}, {master = true, triggers = false})
  return db.update("MemberState", s.objectId, {sharingWith = u.list(sharingWith), ACL = acl}, M.MASTER)
end

function M.without(list, value)
  local out = {}
  for _, v in ipairs(list or {}) do if v ~= value then out[#out + 1] = v end end
  return out
end

function M.contains(list, value)
  for _, v in ipairs(list or {}) do if v == value then return true end end
  return false
end

function M.username(userId)
  local user = db.get("_User", userId, {master = true, keys = "username"})
  return user and user.username or userId
end

-- One Notification per recipient, readable (and markable as read) by that recipient only.
function M.notify(recipients, kind, groupId, actorId, extra)
  local seen = {}
  for _, rid in ipairs(recipients) do
    if not seen[rid] then
      seen[rid] = true
      local n = {recipient = u.user(rid), kind = kind, actor = u.user(actorId), read = false,
                 ACL = {[rid] = {read = true}}}
      if groupId then n.group = u.ptr("Group", groupId) end
      for k, v in pairs(extra or {}) do n[k] = v end
      db.create("Notification", n, M.MASTER)
    end
  end
end

-- Members of the group other than `userId`.
function M.othersIn(groupId, userId)
  return M.without(M.memberIds(groupId), userId)
end

-- A system message in a group's chat: `event` is joined, left, removed, online or offline.
function M.systemMessage(groupId, event, subjectId)
  local texts = {joined = "%s joined", left = "%s left", removed = "%s was removed", online = "%s is online",
                 offline = "%s is offline"}
  return db.create("ChatMessage", {group = u.ptr("Group", groupId), author = u.user(subjectId), kind = "system",
    event = event, text = string.format(texts[event], M.username(subjectId)), ACL = M.groupReadACL(groupId)}, M.MASTER)
end

-- The user's journey under way, or nil.
function M.currentJourney(userId)
  return db.first("Journey", {user = u.user(userId), status = M.ACTIVE_JOURNEY}, M.MASTER)
end

-- Takes `userId` out of a group: role, membership, sharing, a journey shared with the group. The
-- last member leaving deletes the group and everything in it.
function M.removeFromGroup(groupId, userId, event)
  local role = M.role(groupId)
  if role then
    db.update("_Role", role.objectId, {users = {__op = "RemoveRelation", objects = {u.user(userId)}}}, M.MASTER)
  end
  db.deleteWhere("Membership", {group = u.ptr("Group", groupId), user = u.user(userId)}, {master = true, triggers = false})
  local s = M.state(userId)
  if M.contains(s.sharingWith, groupId) then M.setSharing(userId, M.without(s.sharingWith, groupId)) end
  local j = db.first("Journey", {user = u.user(userId), group = u.ptr("Group", groupId), status = M.ACTIVE_JOURNEY}, M.MASTER)
  if j then
    db.update("Journey", j.objectId, {status = "stopped", endedAt = u.date(time.now())}, M.MASTER)
    if s.state == "Routing" then db.update("MemberState", s.objectId, {state = "Active"}, M.MASTER) end
  end
  local left = db.count("Membership", {group = u.ptr("Group", groupId)}, M.MASTER)
  if left == 0 then
    M.deleteGroup(groupId)
    return true
  end
  db.update("Group", groupId, {memberCount = left}, M.MASTER)
  M.systemMessage(groupId, event, userId)
  return false
end

-- Deletes a group with its chat, notifications, journeys and their paths, and its role.
function M.deleteGroup(groupId)
  local g = u.ptr("Group", groupId)
  local bulk = {master = true, triggers = false}
  for _, j in ipairs(db.find("Journey", {group = g}, {master = true, keys = "objectId", limit = 10000})) do
    db.deleteWhere("PathPoint", {journey = u.ptr("Journey", j.objectId)}, bulk)
  end
  db.deleteWhere("Journey", {group = g}, bulk)
  db.deleteWhere("ChatMessage", {group = g}, bulk)
  db.deleteWhere("Notification", {group = g}, bulk)
  db.deleteWhere("Membership", {group = g}, bulk)
  for _, s in ipairs(db.find("MemberState", {sharingWith = groupId}, {master = true, limit = 10000})) do
    M.setSharing(s.user.objectId, M.without(s.sharingWith, groupId))
  end
  local role = M.role(groupId)
  if role then db.delete("_Role", role.objectId, M.MASTER) end
  db.delete("Group", groupId, M.MASTER)
end

return M
