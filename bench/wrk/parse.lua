-- Shared by the Moonbase wrk scripts: Parse headers and URL encoding. Loaded with dofile from
-- the script's own folder (wrk passes the script path; see each script's first lines).
local M = {}
M.appId = os.getenv("MOONBASE_APP_ID") or "moonbase"
function M.headers()
  wrk.headers["X-Parse-Application-Id"] = M.appId
  wrk.headers["Content-Type"] = "application/json"
end
function M.urlencode(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", c:byte()) end))
end
function M.point(lat, lng)
  return string.format('{"__type":"GeoPoint","latitude":%.6f,"longitude":%.6f}', lat, lng)
end
return M
