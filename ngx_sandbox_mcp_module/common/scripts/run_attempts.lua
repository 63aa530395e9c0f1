-- The attempts of a group (opencode_run_task attempts), for the answer of
-- one of its runs: each attempt's fields, read at once.
--
-- KEYS: run:{id} of each attempt, in order (at most 4)
-- ARGV: tenant, then the names of the run hash fields to read
--
-- Returns one array per attempt: its fields' values (nil for an absent
-- one), or an empty array when the run is gone or another tenant's.
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('HMGET', k, 'tenant', unpack(ARGV, 2))
  if v[1] == ARGV[1] then
    table.remove(v, 1)
    out[i] = v
  else
    out[i] = {}
  end
end
return out
