-- lib/grants.lua: a token's repository grants against a run's
-- repositories, for the scripts that check them (run_create.lua,
-- run_message.lua, run_pick.lua: a line "--@include grants", README.md).
-- This opening comment stays here: the scripts embed the code below.
--
-- Grants are the token's "repos" claim as run_create.lua is handed them:
-- OWNER/NAME or OWNER/*, in lower case, without ".git", ',' between them
-- ("acme/app,tools/*"); "*" every repository; "" none.
--
-- run_urls(repository, repositories) takes a run's `repository` and
-- `repositories` as HMGET gives its hash's fields (false: absent).
-- Returns the run's repository URLs, a list: each of `repositories` (a
-- JSON array; anything else: none) as a string, then `repository` unless
-- it is empty.
--
-- ungranted(grants, urls, star_any) takes grants (as above; nil: none), a
-- list of repository URLs and star_any (true: "*" lets any URL through;
-- false: only those of the form below).  Returns the first URL the grants
-- do not cover, else nil.  A URL is covered when it is
-- https://HOST/OWNER/NAME (any case) and the grants hold OWNER/NAME,
-- OWNER/* or "*".
local function run_urls(repository, repositories)
  local urls = {}
  local ok, list = pcall(cjson.decode, repositories or '[]')
  if ok and type(list) == 'table' then
    for _, u in ipairs(list) do urls[#urls + 1] = tostring(u) end
  end
  if (repository or '') ~= '' then urls[#urls + 1] = repository end
  return urls
end

local function ungranted(grants, urls, star_any)
  local g = ',' .. (grants or '') .. ','
  local star = string.find(g, ',*,', 1, true)
  if star and star_any then return nil end
  for _, url in ipairs(urls) do
    local o, n = string.match(string.lower(url),
                              '^https://[^/]+/([^/]+)/([^/]+)$')
    if not (o and (star or string.find(g, ',' .. o .. '/*,', 1, true)
                   or string.find(g, ',' .. o .. '/' .. n .. ',', 1, true)))
    then
      return url
    end
  end
  return nil
end
