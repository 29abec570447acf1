-- wrk script: joins only, to fill a node's queue. Each thread stops after JOINS_PER_THREAD
-- answers (from the environment), so a run queues threads × JOINS_PER_THREAD visitors however
-- long it is given.
local limit, answered = 0, 0

function init(args)
  limit = tonumber(os.getenv("JOINS_PER_THREAD") or "0")
end

function request()
  return wrk.format("POST", "/api/join", { ["content-type"] = "application/json" }, "{}")
end

function response(status, headers, body)
  answered = answered + 1
  if answered >= limit then
    wrk.thread:stop()
  end
end
