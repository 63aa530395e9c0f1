-- wrk script for bench/run: one fixed request, figures as one JSON line.
--
-- Configured from the environment (bench/run sets it):
--   BENCH_METHOD     GET | POST (default GET)
--   BENCH_BODY       the request body (none when unset or empty)
--   BENCH_HEADERS    "Name: value" lines, newline-separated
--   BENCH_RUNS_FILE  when set (opencode_run_task): count requests sent and
--                    answers, keep the runId of every 200 answer that is a
--                    successful tool result, and write them there, one a
--                    line.  Costs a Lua callback per response, so only the
--                    write measurement uses it.
--
-- done() prints "BENCHJSON {...}": requests, duration_us, latency
-- percentiles (microseconds), wrk's error counters and, with
-- BENCH_RUNS_FILE, sent / ok / other.

local method    = os.getenv("BENCH_METHOD") or "GET"
local body      = os.getenv("BENCH_BODY")
local hdrs      = os.getenv("BENCH_HEADERS") or ""
local runs_file = os.getenv("BENCH_RUNS_FILE")

wrk.method = method
if body and body ~= "" then
    wrk.body = body
end
for line in hdrs:gmatch("[^\n]+") do
    local k, v = line:match("^([^:]+):%s*(.-)%s*$")
    if k then
        wrk.headers[k] = v
    end
end

if runs_file and runs_file ~= "" then
    -- per-thread counters (globals: read back with thread:get in done)
    sent, ok, other = 0, 0, 0
    ids = {}
    local req

    function init(args)
        req = wrk.format()
    end

    function request()
        sent = sent + 1
        return req
    end

    function response(status, headers, resp)
        local id
        if status == 200 and not resp:find('"isError":true', 1, true) then
            -- the structuredContent copy (the text copy is escaped: \")
            id = resp:match('"runId":"(run_[%w_]+)"')
        end
        if id then
            ok = ok + 1
            ids[#ids + 1] = id
        else
            other = other + 1
        end
    end
end

local threads = {}

function setup(thread)
    threads[#threads + 1] = thread
end

function done(summary, latency, requests)
    local e = summary.errors
    local parts = {
        string.format('"requests":%d', summary.requests),
        string.format('"duration_us":%d', summary.duration),
        string.format('"bytes":%d', summary.bytes),
        string.format('"lat_mean_us":%.1f', latency.mean),
        string.format('"lat_max_us":%d', latency.max),
        string.format('"lat_p50_us":%d', latency:percentile(50)),
        string.format('"lat_p90_us":%d', latency:percentile(90)),
        string.format('"lat_p99_us":%d', latency:percentile(99)),
        string.format('"err_connect":%d,"err_read":%d,"err_write":%d,'
                      .. '"err_status":%d,"err_timeout":%d',
                      e.connect, e.read, e.write, e.status, e.timeout),
    }
    if runs_file and runs_file ~= "" then
        local s, o, x = 0, 0, 0
        local f = assert(io.open(runs_file, "w"))
        for _, t in ipairs(threads) do
            s = s + (t:get("sent") or 0)
            o = o + (t:get("ok") or 0)
            x = x + (t:get("other") or 0)
            for _, id in ipairs(t:get("ids") or {}) do
                f:write(id, "\n")
            end
        end
        f:close()
        parts[#parts + 1] = string.format('"sent":%d,"ok":%d,"other":%d',
                                          s, o, x)
    end
    io.write("BENCHJSON {" .. table.concat(parts, ",") .. "}\n")
end
