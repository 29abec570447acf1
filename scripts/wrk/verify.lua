-- wrk script: pass checks as a gate makes them (nginx auth_request): GET /api/pass/verify with
-- a real pass in the Authorization header. PASSES (a file, one pass per line) gives the passes,
-- round robin: many visitors on the site, each making requests.
local passes, n = {}, 0

function init(args)
  for line in io.lines(os.getenv("PASSES")) do
    n = n + 1
    passes[n] = line
  end
end

local i = 0
function request()
  i = i % n + 1
  return wrk.format("GET", "/api/pass/verify", { ["authorization"] = "Bearer " .. passes[i] })
end
