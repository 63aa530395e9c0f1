-- A page of a run's events for the dashboard's stream, with the run's
-- status (the stream ends once the run has ended and all was sent).
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:events
-- ARGV: tenant, start id ('-' or '(<id>'), count
--
-- Returns {status, the XRANGE reply}, or nil (unknown run, or another
-- tenant's).
local h = redis.call('HMGET', KEYS[1], 'tenant', 'status')
if h[1] ~= ARGV[1] then return nil end
return {h[2] or '',
        redis.call('XRANGE', KEYS[2], ARGV[2], '+', 'COUNT', ARGV[3])}
