# Codex CLI's `codex exec --json` lines as OpenCode's `run --format json`
# events, for the runner and the dashboard, which read nothing else:
#
#   codex exec --json ... | jq -ncR --unbuffered -f codex.jq
#
# One compact object a line, each with type, timestamp (ms) and sessionID
# (Codex's thread_id, "" until thread.started): text (agent_message),
# reasoning, tool_use (command_execution as bash, file_change as edit,
# mcp_tool_call as SERVER_TOOL, web_search, todo_list, collab_tool_call;
# once completed or failed), step_start/step_finish (turn.started,
# turn.completed: tokens, cost 0 as Codex reports none) and error
# (turn.failed, error; not Codex's "Reconnecting..." retries nor its
# warning items).  Anything else (other lines, non-JSON, non-objects,
# wrong types) is dropped without a word.  jq 1.6 (Debian 12) only.
#
# Codex's usage is the thread's running total (a resumed thread's first
# turn.completed counts every earlier run too): each step_finish counts
# what the total grew by since the last one, or since
# $base (jq --argjson base: the usage object the thread's previous run
# ended with, the rollout's last token_count .payload.info.total_token_usage;
# null for a new thread).  Codex's input_tokens include the cached ones.

# a token count: a non-negative whole number, else 0
def count: if type == "number" and . >= 0 and . < 1e15 then floor else 0 end;

# a string, or "" for anything else
def str: if type == "string" then . else "" end;

# at most n characters
def cut(n): if length > n then .[:n] + "\n[... truncated: \(length) characters]" else . end;

def short: .[:400] | gsub("\\s+"; " ") | if length > 200 then .[:199] + "…" else . end;

# Codex's usage object, counts only
def usage:
    (if type == "object" then . else {} end) as $u
    | { input: ($u.input_tokens | count),
        cached: ($u.cached_input_tokens | count),
        output: ($u.output_tokens | count),
        reasoning: ($u.reasoning_output_tokens | count) };

# the command the model gave, out of Codex's `/bin/bash -lc '...'`
def unwrap:
    (capture("\\A(/usr)?(/bin/)?(ba|z)?sh -l?c (?<r>.*)\\z"; "p").r // .) as $r
    | if ($r | test("\\A'.*'\\z"; "p"))
         and ($r[1:-1] | split("'\\''") | all(index("'") == null))
      then $r[1:-1] | split("'\\''") | join("'")
      elif ($r | test("\\A\"(?:[^\"\\\\]|\\\\.)*\"\\z"; "p"))
      then $r[1:-1] | split("\\\\")
           | map(split("\\\"") | join("\"") | split("\\$") | join("$")
                 | split("\\`") | join("`"))
           | join("\\")
      else $r end;

def tool($name; $ok; $input; $output; $title):
    { type: "tool_use",
      part: { type: "tool", tool: $name, callID: (.id | str | .[:200]),
              state: ({ status: (if $ok then "completed" else "error" end),
                        input: $input,
                        output: ($output | cut(16384)),
                        title: ($title | short) }
                      + (if $ok then {} else { error: ($output | cut(4096)) } end)) } };

# a completed (or failed) item as OpenCode's event, or nothing
def item:
    if .type == "agent_message" and (.text | type) == "string" then
        { type: "text", part: { type: "text", text: (.text | cut(40000)) } }
    elif .type == "reasoning" and (.text | type) == "string" then
        { type: "reasoning", part: { type: "reasoning", text: (.text | cut(16384)) } }
    elif .type == "command_execution" then
        (.command | str | if length < 16384 then (try unwrap catch .) else . end) as $c
        | (.status == "completed") as $ok
        | (.aggregated_output | str) as $o
        | tool("bash"; $ok; { command: ($c | cut(8192)) };
               if $ok or $o != "" then $o else "exit code \(.exit_code // "none")" end;
               $c)
    elif .type == "file_change" then
        [ .changes | if type == "array" then .[:64][] else empty end
          | select(type == "object")
          | { path: (.path | str | .[:300]), kind: (.kind | str | .[:20]) } ] as $ch
        | tool("edit"; .status == "completed";
               { changes: $ch }
               + (if ($ch | length) == 1 then { filePath: $ch[0].path } else {} end);
               $ch | map("\(.kind) \(.path)") | join("\n");
               $ch | map(.path) | join(", "))
    elif .type == "mcp_tool_call" then
        "\(.server | str | .[:100])_\(.tool | str | .[:100])" as $n
        | ((.error | if type == "object" then .message else . end)
           | if type == "string" then . else null end) as $err
        | tool($n; .status == "completed" and $err == null;
               .arguments | if type != "object" then {}
                            elif (tojson | length) > 32768 then { truncated: (tojson | .[:16384]) }
                            else . end;
               $err // ([ .result.content | if type == "array" then .[] else empty end
                          | select(type == "object")
                          | if .type == "text" then .text | str else "[\(.type | str)]" end ]
                        | join("\n"));
               $n)
    elif .type == "web_search" then
        tool("websearch"; true; { query: (.query | str | cut(2048)) }; ""; .query | str)
    elif .type == "todo_list" then
        [ .items | if type == "array" then .[:100][] else empty end | select(type == "object")
          | { content: (.text | str | cut(500)),
              status: (if .completed == true then "completed" else "pending" end) } ] as $t
        | tool("todowrite"; true; { todos: $t }; $t | tojson; "\($t | length) todos")
    elif .type == "collab_tool_call" then
        tool("task"; .status != "failed"; { prompt: (.prompt | str | cut(8192)), tool: (.tool | str | .[:200]) };
             ""; .tool | str)
    else empty end;

# "unexpected status 401 Unauthorized: ..." -> an APIError with statusCode
def err($m):
    ($m | str | cut(8192)) as $m
    | ($m | capture("status (?<s>[1-5][0-9][0-9])\\b").s // null) as $s
    | { type: "error",
        error: { name: (if $s then "APIError" else "UnknownError" end),
                 data: ({ message: $m } + (if $s then { statusCode: ($s | tonumber) } else {} end)) } };

# one line's events, as the new state's .out
def step($e):
    .out = []
    | if ($e | type) != "object" then .
      elif $e.type == "thread.started" then
        if ($e.thread_id | type) == "string" and ($e.thread_id | test("\\A[A-Za-z0-9_-]{1,95}\\z"))
        then .sid = $e.thread_id else . end
      elif $e.type == "turn.started" then
        .out = [{ type: "step_start", part: { type: "step-start" } }]
      elif $e.type == "item.completed" and ($e.item | type) == "object" then
        .out = [$e.item | item]
      elif $e.type == "turn.completed" then
        ($e.usage | usage) as $u
        | .prev as $p
        | (if $u.input >= $p.input and $u.cached >= $p.cached and $u.output >= $p.output
              and $u.reasoning >= $p.reasoning
           then { input: ($u.input - $p.input), cached: ($u.cached - $p.cached),
                  output: ($u.output - $p.output) }
           else $u end) as $d
        | .prev = $u
        | .out = [{ type: "step_finish",
                    part: { type: "step-finish", reason: "stop",
                            tokens: { input: ([$d.input - $d.cached, 0] | max),
                                      output: $d.output, reasoning: 0,
                                      cache: { read: $d.cached, write: 0 } },
                            cost: 0 } }]
      elif $e.type == "turn.failed" then
        ($e.error | if type == "object" then .message else . end | str) as $m
        | if $m == .lasterr then . else .out = [err(if $m == "" then "turn failed" else $m end)] end
      elif $e.type == "error" then
        ($e.message | str) as $m
        | if ($m | startswith("Reconnecting...")) then .
          else .lasterr = $m | .out = [err(if $m == "" then "error" else $m end)] end
      else . end;

($base | usage) as $base
| foreach (inputs | try fromjson catch null) as $e (
    { sid: "", prev: $base, lasterr: null, out: [] };
    . as $s | try ($s | step($e)) catch ($s | .out = []);
    . as $s | .out[] | select(type == "object")
    | { type: .type, timestamp: (now * 1000 | floor), sessionID: $s.sid } + .
  )
