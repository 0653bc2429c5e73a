-- W3 / W3s: newest 20 posts in a random BOX x BOX degree box, in Parse's shape:
--   GET /parse/classes/CLASS?where={"location":{"$within":{"$box":[sw,ne]}}}&order=-createdAt&limit=20
-- The boxes are the ones the peers kit's wrk/query.lua sends to PocketBase (same seed 1234, same draws).
-- usage: wrk ... -s box.lua http://127.0.0.1:PORT -- [BOX] [CLASS]   (BOX default 0.1, CLASS Bench)
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local parse = dofile(dir .. "parse.lua")
local box, class = 0.1, "Bench"
function init(args)
  box = tonumber(args[1] or "0.1")
  class = args[2] or "Bench"
  math.randomseed(1234)
  parse.headers()
end
function request()
  local minLat = 40 + math.random() * (1 - box)
  local minLng = -74.5 + math.random() * (1 - box)
  local where = string.format('{"location":{"$within":{"$box":[%s,%s]}}}',
    parse.point(minLat, minLng), parse.point(minLat + box, minLng + box))
  return wrk.format("GET", "/parse/classes/" .. class .. "?where=" .. parse.urlencode(where) ..
    "&order=-createdAt&limit=20")
end
