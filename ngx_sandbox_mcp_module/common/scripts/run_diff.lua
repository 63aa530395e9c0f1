-- A page of a run's diff, or of one file's section of it
-- (opencode_get_diff).  The section is found in the run's diff_index
-- (path -> [offset, length], written by the runner): only that page
-- leaves Redis.  Without a usable index the whole diff is sent for the
-- module to search, when it is at most the scan limit.
--
-- KEYS[1] run:{id}   KEYS[2] run:{id}:diff
-- ARGV: tenant, offset (in the diff or the section), page size, path or
-- '', scan limit
--
-- Returns {bytes, total (of the diff or the section), how}, how being
-- 'range', 'index', 'whole' (bytes = the whole diff) or 'noindex'; or nil
-- (unknown run, or another tenant's).
local h = redis.call('HMGET', KEYS[1], 'tenant', 'diff_index')
if h[1] ~= ARGV[1] then return nil end
local off, page = tonumber(ARGV[2]), tonumber(ARGV[3])
local total = redis.call('STRLEN', KEYS[2])
if ARGV[4] == '' then
  return {redis.call('GETRANGE', KEYS[2], off, off + page - 1), total,
          'range'}
end
local ok, idx = false, nil
if h[2] then ok, idx = pcall(cjson.decode, h[2]) end
if ok and type(idx) == 'table' then
  local e = idx[ARGV[4]]
  if e == nil then return {'', 0, 'index'} end
  local s = type(e) == 'table' and tonumber(e[1])
  local n = type(e) == 'table' and tonumber(e[2])
  if s and n and s >= 0 and n >= 0 and s % 1 == 0 and n % 1 == 0
     and s + n <= total then
    if off >= n then return {'', n, 'index'} end
    local last = math.min(s + n, s + off + page) - 1
    return {redis.call('GETRANGE', KEYS[2], s + off, last), n, 'index'}
  end
end
if total <= tonumber(ARGV[5]) then
  return {redis.call('GET', KEYS[2]) or '', total, 'whole'}
end
return {'', total, 'noindex'}
