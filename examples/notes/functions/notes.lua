-- Notes synced across devices, last writer wins. Each device makes a note's id (a UUID) and
-- stamps every change with its own clock (`modifiedAt`, ms) and id (`device`); the server keeps,
-- for each note, the copy with the greatest (modifiedAt, device) — so every replica converges to
-- the same copy whatever order the pushes arrive in. Deletes are tombstones (`deleted = true`)
-- that sync like any change and are purged after 30 days.

local MAX_PUSH = 100
local MAX_TITLE, MAX_BODY = 200, 100000
local TOMBSTONE_DAYS = 30

local function fail(code, message) error(cloud.error(code, message), 0) end
local function present(v) return v ~= nil and v ~= json.null end
local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end
local function asList(list) if #list == 0 then return json.array() end return list end

local function isInteger(v) return math.type(v) == "integer" or (type(v) == "number" and v == math.floor(v) and v == v) end

local function checkLength(v, name, max)
  if type(v) ~= "string" then fail(cloud.codes.VALIDATION_ERROR, name .. " must be a string") end
  local n = utf8.len(v)
  if not n then fail(cloud.codes.VALIDATION_ERROR, name .. " must be valid UTF-8") end
  if n > max then fail(cloud.codes.VALIDATION_ERROR, name .. " must be at most " .. max .. " characters") end
end

-- The ACL of a note: its owner and every collaborator read and write it; nobody else sees it.
local function aclFor(ownerId, sharedWith)
  local acl = {[ownerId] = {read = true, write = true}}
  for _, u in ipairs(sharedWith or {}) do
    if type(u) == "table" and type(u.objectId) == "string" then acl[u.objectId] = {read = true, write = true} end
  end
  return acl
end

cloud.index("Note", {"owner", "noteId"}, {unique = true})
cloud.index("Note", {"noteId"})
cloud.index("Note", {"deleted", "updatedAt"})
-- Notes are written through pushNotes / shareNote; reads go through ACLs (owner and collaborators).
cloud.classPermissions("Note", {create = {}, update = {}, delete = {}})

cloud.beforeSave("Note", function(req)
  local o, old = req.object, req.original
  if type(o.noteId) ~= "string" or #o.noteId == 0 or #o.noteId > 100 then fail(cloud.codes.VALIDATION_ERROR, "noteId must be a string of 1 to 100 bytes") end
  checkLength(o.title or "", "title", MAX_TITLE)
  checkLength(o.body or "", "body", MAX_BODY)
  if not isInteger(o.modifiedAt) or o.modifiedAt < 0 then fail(cloud.codes.VALIDATION_ERROR, "modifiedAt must be a whole number of milliseconds") end
  if type(o.device) ~= "string" or #o.device == 0 or #o.device > 100 then fail(cloud.codes.VALIDATION_ERROR, "device must be a string of 1 to 100 bytes") end
  if type(o.deleted) ~= "boolean" then o.deleted = false end
  if old then
    if o.noteId ~= old.noteId then fail(cloud.codes.VALIDATION_ERROR, "noteId cannot change") end
    if (o.owner and o.owner.objectId) ~= (old.owner and old.owner.objectId) then fail(cloud.codes.VALIDATION_ERROR, "owner cannot change") end
  end
  -- The ACL always follows the owner and sharedWith.
  o.ACL = aclFor(o.owner.objectId, o.sharedWith)
end)

-- One pushed note, validated: the fields a device may set.
local function pushed(n, i)
  local where = "notes[" .. i .. "]"
  if type(n) ~= "table" then fail(cloud.codes.VALIDATION_ERROR, where .. " must be an object") end
  if type(n.noteId) ~= "string" or #n.noteId == 0 then fail(cloud.codes.VALIDATION_ERROR, where .. ".noteId is required") end
  if not isInteger(n.modifiedAt) then fail(cloud.codes.VALIDATION_ERROR, where .. ".modifiedAt must be a whole number of milliseconds") end
  if type(n.device) ~= "string" or #n.device == 0 then fail(cloud.codes.VALIDATION_ERROR, where .. ".device is required") end
  if present(n.deleted) and type(n.deleted) ~= "boolean" then fail(cloud.codes.VALIDATION_ERROR, where .. ".deleted must be true or false") end
  checkLength(present(n.title) and n.title or "", where .. ".title", MAX_TITLE)
  checkLength(present(n.body) and n.body or "", where .. ".body", MAX_BODY)
  return {title = present(n.title) and n.title or "", body = present(n.body) and n.body or "",
          modifiedAt = math.tointeger(n.modifiedAt), device = n.device, deleted = n.deleted == true}
end

-- Applies one copy if it is newer than the stored one, as one conditional write: the update's
-- where holds the last-writer-wins test (and the caller's access: owner or collaborator), so two
-- devices racing on the same note cannot both win.
local function applyOne(me, n, fields)
  local newer = {["$or"] = {
    {modifiedAt = {["$lt"] = fields.modifiedAt}},
    {modifiedAt = fields.modifiedAt, device = {["$lt"] = fields.device}},
  }}
  local mine = {["$or"] = {{owner = ptr("_User", me)}, {sharedWith = ptr("_User", me)}}}
  local where = {noteId = n.noteId, ["$and"] = {newer, mine}}
  if db.updateWhere("Note", where, fields, {master = true}) > 0 then return "applied" end
  local stored = db.first("Note", {noteId = n.noteId})
  if stored then return "stale", stored end
  local ok, err = pcall(db.create, "Note", {noteId = n.noteId, title = fields.title, body = fields.body,
    modifiedAt = fields.modifiedAt, device = fields.device, deleted = fields.deleted, owner = ptr("_User", me),
    sharedWith = json.array()}, {master = true})
  if ok then return "applied" end
  if type(err) == "table" and err.code == cloud.codes.DUPLICATE_VALUE then
    -- Another push created it first: the same test again, against that copy.
    if db.updateWhere("Note", where, fields, {master = true}) > 0 then return "applied" end
    return "stale", db.first("Note", {noteId = n.noteId})
  end
  error(err, 0)
end

-- pushNotes {notes: [{noteId, title, body, modifiedAt, device, deleted?}]}
--   -> {results: [{noteId, status: "applied" | "stale", note?}]} (note: the stored copy when stale)
cloud.define("pushNotes", {requireUser = true, maxDbOps = 2000}, function(req)
  local list = (req.params or {}).notes
  if type(list) ~= "table" or #list == 0 then fail(cloud.codes.VALIDATION_ERROR, "notes must be a non-empty array") end
  if #list > MAX_PUSH then fail(cloud.codes.VALIDATION_ERROR, "at most " .. MAX_PUSH .. " notes per push") end
  local prepared = {}
  for i, n in ipairs(list) do prepared[i] = pushed(n, i) end
  local results = {}
  for i, n in ipairs(list) do
    local status, stored = applyOne(req.user.objectId, n, prepared[i])
    results[i] = {noteId = n.noteId, status = status, note = stored}
  end
  return {results = results}
end)

-- pullNotes {since = 0, limit = 100} -> {notes: [...], next: cursor, more: bool}: every note
-- changed after the cursor that the caller may read (own and shared), tombstones included, in
-- change order, each at its latest state; `next` is the cursor for the following pull.
cloud.define("pullNotes", {requireUser = true}, function(req)
  local p = req.params or {}
  local since = present(p.since) and p.since or 0
  if not isInteger(since) or since < 0 then fail(cloud.codes.VALIDATION_ERROR, "since must be a cursor from a previous pull (or 0)") end
  local limit = present(p.limit) and p.limit or 100
  if not isInteger(limit) or limit < 1 or limit > 1000 then fail(cloud.codes.VALIDATION_ERROR, "limit must be a whole number from 1 to 1000") end
  local page = db.changes("Note", math.tointeger(since), {limit = math.tointeger(limit)})
  local notes = {}
  for _, row in ipairs(page.results) do
    if row.object then notes[#notes + 1] = row.object end
  end
  return {notes = asList(notes), next = page.next, more = #page.results == limit}
end)

-- The note with this id that the caller owns (101 when there is none: another user's note
-- stays hidden).
local function ownNote(me, noteId)
  if type(noteId) ~= "string" or noteId == "" then fail(cloud.codes.VALIDATION_ERROR, "noteId is required") end
  local n = db.first("Note", {noteId = noteId, owner = ptr("_User", me)})
  if not n then fail(cloud.codes.OBJECT_NOT_FOUND, "no note " .. noteId) end
  return n
end

local function userByName(username)
  if type(username) ~= "string" or username == "" then fail(cloud.codes.VALIDATION_ERROR, "username is required") end
  local u = db.first("_User", {username = username}, {keys = "username", master = true})
  if not u then fail(cloud.codes.OBJECT_NOT_FOUND, "no user " .. username) end
  return u
end

-- shareNote {noteId, username}: the collaborator may read and write the note; their devices sync it.
cloud.define("shareNote", {requireUser = true}, function(req)
  local p = req.params or {}
  local note = ownNote(req.user.objectId, p.noteId)
  local u = userByName(p.username)
  if u.objectId == req.user.objectId then fail(cloud.codes.VALIDATION_ERROR, "a note is always shared with its owner") end
  return db.update("Note", note.objectId, {sharedWith = {__op = "AddUnique", objects = {ptr("_User", u.objectId)}}}, {master = true})
end)

-- unshareNote {noteId, username}: the collaborator loses the note at once (REST and realtime).
cloud.define("unshareNote", {requireUser = true}, function(req)
  local p = req.params or {}
  local note = ownNote(req.user.objectId, p.noteId)
  local u = userByName(p.username)
  return db.update("Note", note.objectId, {sharedWith = {__op = "Remove", objects = {ptr("_User", u.objectId)}}}, {master = true})
end)

-- purgeTombstones: deleted notes whose last change is older than 30 days (daily in cron/).
cloud.job("purgeTombstones", function(req)
  local days = present(req.params.days) and req.params.days or TOMBSTONE_DAYS
  local cutoff = time.now() - math.floor(days * 86400000)
  local iso = os.date("!%Y-%m-%dT%H:%M:%S", cutoff // 1000) .. string.format(".%03dZ", cutoff % 1000)
  local n = db.deleteWhere("Note", {deleted = true, updatedAt = {["$lt"] = {__type = "Date", iso = iso}}},
                           {master = true, triggers = false})
  return {purged = n}
end)
