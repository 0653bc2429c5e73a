-- Jobs of the crags app: demo data for a fresh server, and a weekly recount of each crag's
-- reviewsCount (the triggers keep it exact; the recount repairs it after a restore or a manual
-- edit with the master key).

local DEMO_PASSWORD = "moonbase-demo"
local CLIMBERS = {"alex", "lynn", "chris", "beth"}
local CRAGS = {
  {"Bas Cuvier", "Fontainebleau, France", 48.4470, 2.6360},
  {"Apremont", "Fontainebleau, France", 48.4240, 2.6240},
  {"Cuvier Rempart", "Fontainebleau, France", 48.4482, 2.6406},
  {"Camp 4 Boulders", "Yosemite Valley, California", 37.7420, -119.6020},
  {"Swan Slab", "Yosemite Valley, California", 37.7425, -119.6040},
}
local DIFFICULTIES = {"easy", "moderate", "hard", "unknown"}
local STYLES = {"free", "handFoot", "noFeet", "unknown"}

local function ptr(className, id) return {__type = "Pointer", className = className, objectId = id} end

cloud.job("seedDemo", function(req)
  if db.count("Crag", {}, {master = true}) > 0 then return "skipped: the server already has crags" end
  local state = 7                            -- a fixed sequence: the same demo on every fresh server
  local function pick(n)
    state = (state * 1103515245 + 12345) % 2147483648
    return (state // 65536) % n + 1
  end
  local users = {}
  for i, name in ipairs(CLIMBERS) do
    local u = db.first("_User", {username = name}, {keys = "objectId", master = true})
    users[i] = u and u.objectId or db.create("_User", {username = name, password = DEMO_PASSWORD,
      email = name .. "@demo.moonbase.test"}, {master = true}).objectId
  end
  req.progress(0.3, "climbers ready")
  local reviews = 0
  for c, spec in ipairs(CRAGS) do
    local crag = db.create("Crag", {name = spec[1], address = spec[2],
      location = {__type = "GeoPoint", latitude = spec[3], longitude = spec[4]}}, {master = true})
    for k = 1, 6 do
      local author = users[pick(#users)]
      local day = pick(28)
      db.create("Review", {
        crag = ptr("Crag", crag.objectId), author = ptr("_User", author),
        climbedAt = {__type = "Date", iso = string.format("2026-%02d-%02dT10:00:00.000Z", 1 + pick(10), day)},
        difficulty = DIFFICULTIES[pick(#DIFFICULTIES)], style = STYLES[pick(#STYLES)],
        sent = pick(3) ~= 1, project = pick(4) == 1, clientId = "seed-" .. c .. "-" .. k,
        ACL = {["*"] = {read = true}, [author] = {read = true, write = true}},
      }, {master = true})
      reviews = reviews + 1
    end
    req.progress(0.3 + 0.7 * c / #CRAGS, "crag " .. spec[1])
  end
  return {crags = #CRAGS, reviews = reviews, climbers = #CLIMBERS}
end)

cloud.job("recountReviews", function(req)
  local fixed, skip = 0, 0
  while true do
    local page = db.find("Crag", {}, {keys = "reviewsCount", order = "createdAt", limit = 1000, skip = skip, master = true})
    for _, c in ipairs(page) do
      local n = db.count("Review", {crag = ptr("Crag", c.objectId)}, {master = true})
      if n ~= c.reviewsCount then
        db.update("Crag", c.objectId, {reviewsCount = n}, {master = true})
        fixed = fixed + 1
      end
    end
    if #page < 1000 then break end
    skip = skip + #page
  end
  return {fixed = fixed}
end)
