-- W5: newest 20 posts within MILES of a random point of the data area (lat 40..41,
-- lng -74.5..-73.5), in Parse's shape:
--   GET /parse/classes/CLASS?where={"location":{"$nearSphere":P,"$maxDistanceInMiles":5}}&order=-createdAt&limit=20
-- usage: wrk ... -s near.lua http://127.0.0.1:PORT -- [CLASS] [MILES]   (default BenchM, 5)
local dir = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local parse = dofile(dir .. "parse.lua")
local class, miles = "BenchM", 5
function init(args)
  class = args[1] or "BenchM"
  miles = tonumber(args[2] or "5")
  math.randomseed(5678)
  parse.headers()
end
function request()
  local where = string.format('{"location":{"$nearSphere":%s,"$maxDistanceInMiles":%g}}',
    parse.point(40 + math.random(), -74.5 + math.random()), miles)
  return wrk.format("GET", "/parse/classes/" .. class .. "?where=" .. parse.urlencode(where) ..
    "&order=-createdAt&limit=20")
end
