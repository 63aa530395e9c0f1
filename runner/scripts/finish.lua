-- The outcome of a run, once: a run already ended (cancelled before it
-- started) keeps its status.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events   KEYS[3] channel run:{id}
-- KEYS[4] run:{id}:diff ('' when there is no diff)
-- ARGV: status, now (ms), events maxlen, then field/value pairs for the
-- run hash, then (when KEYS[4] is given) the diff.
--
-- Returns 'ok', or the status the run already had.
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'completed' or st == 'failed' or st == 'cancelled' then
  return st
end
local fv = {'status', ARGV[1], 'finished_at', ARGV[2]}
local last = #ARGV
if KEYS[4] ~= '' then last = last - 1 end
for i = 4, last do fv[#fv + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fv))
if KEYS[4] ~= '' then redis.call('SET', KEYS[4], ARGV[#ARGV]) end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'type',
           'lifecycle', 'data', cjson.encode({status = ARGV[1]}),
           'ts', ARGV[2])
redis.call('PUBLISH', KEYS[3], ARGV[1])
return 'ok'
