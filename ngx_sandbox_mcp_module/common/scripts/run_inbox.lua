-- The sandbox takes the next message for its agent (the egress route
-- `inbox`, polled by the sandbox while the agent runs; its token already
-- checked to be the run's, the run live).  Taken is delivered: the run's
-- timeline says when.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:inbox   KEYS[3] run:{id}:events
-- KEYS[4] channel run:{id}
-- ARGV: tenant, now (ms), events maxlen
--
-- Returns nil (nothing waiting, or the run not the tenant's: nothing
-- written; or the oldest entry was not run_message's {id, text}: dropped,
-- and the sandbox asks again), or {message id, text}.
local h = redis.call('HGET', KEYS[1], 'tenant')
if h ~= ARGV[1] then return nil end

local m = redis.call('LPOP', KEYS[2])
if not m then return nil end

local ok, v = pcall(cjson.decode, m)
if not ok or type(v) ~= 'table' or type(v.id) ~= 'number'
   or type(v.text) ~= 'string' then
  return nil
end

redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*',
  'type', 'message',
  'data', cjson.encode({id = v.id, delivered = true}),
  'ts', ARGV[2])
redis.call('PUBLISH', KEYS[4], 'message')
return {v.id, v.text}
