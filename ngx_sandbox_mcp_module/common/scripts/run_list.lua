-- A page of runs, newest first, resumable.
--
-- KEYS[1] runs zset (the tenant's or the session's)
-- KEYS[2] session:{sid} (or '')
-- ARGV: tenant, limit, cursor run id or '', cursor score, status or '',
-- run key prefix, scan budget
--
-- Returns {next id or '', next score or '', {{id, status, session, title,
-- created_at, finished_at}...}}.
if KEYS[2] ~= '' and
   redis.call('HGET', KEYS[2], 'tenant') ~= ARGV[1] then
  return {'', '', {}}
end
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[7])
local pos = 0
if ARGV[3] ~= '' then
  local rank = redis.call('ZREVRANK', KEYS[1], ARGV[3])
  if rank then pos = rank + 1 else
    pos = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[4], '+inf')
  end
end
local out, last, lastscore = {}, '', ''
local total = redis.call('ZCARD', KEYS[1])
while #out < limit and pos < total and budget > 0 do
  local ids = redis.call('ZREVRANGE', KEYS[1], pos, pos + 99,
                         'WITHSCORES')
  if #ids == 0 then break end
  for i = 1, #ids, 2 do
    pos = pos + 1
    budget = budget - 1
    last, lastscore = ids[i], ids[i + 1]
    local h = redis.call('HMGET', ARGV[6] .. ids[i], 'tenant',
      'status', 'session', 'title', 'created_at', 'finished_at')
    if h[1] == ARGV[1] and (ARGV[5] == '' or h[2] == ARGV[5]) then
      out[#out + 1] = {ids[i], h[2] or '', h[3] or '', h[4] or '',
                       h[5] or '', h[6] or ''}
    end
    if #out >= limit or budget <= 0 then break end
  end
end
if pos >= total then last, lastscore = '', '' end
return {last, lastscore, out}
