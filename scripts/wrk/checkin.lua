-- wrk script: check-ins with real tickets. TICKETS (a file, one ticket per line) gives the
-- tickets to check in with, round robin; without it each thread joins once and then checks in
-- with the ticket every answer returns (join once per connection's thread, as a page would).
local tickets, n, current = {}, 0, nil

function setup(thread)
  thread:set("id", tostring(math.random(1, 1e9)))
end

function init(args)
  local path = os.getenv("TICKETS")
  if path then
    for line in io.lines(path) do
      n = n + 1
      tickets[n] = line
    end
  end
end

local i = 0
function request()
  local ticket = current
  if n > 0 then
    i = i % n + 1
    ticket = tickets[i]
  end
  if not ticket then
    return wrk.format("POST", "/api/join", { ["content-type"] = "application/json" }, "{}")
  end
  return wrk.format("POST", "/api/checkin", { ["content-type"] = "application/json" },
    '{"ticket":"' .. ticket .. '"}')
end

function response(status, headers, body)
  if n == 0 and status == 200 then
    current = string.match(body, '"ticket":"([^"]+)"') or current
  end
end
