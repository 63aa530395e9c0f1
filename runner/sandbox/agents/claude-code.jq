# Claude Code's `claude -p --output-format stream-json --verbose` lines ->
# OpenCode-shaped events (`opencode run --format json`), one compact JSON
# object per line, each {"type","timestamp" (ms),"sessionID" (when known),..}:
#
#   jq -ncR --unbuffered -f claude-code.jq
#
# Measured against Claude Code 2.1.328 (notes: /work/shared/notes/agents.md).
# jq 1.6 only.  Every input line is parsed with fromjson?; a line that is not
# a JSON object is dropped, and every field is type-checked, so no input makes
# this fail or print anything but objects.
#
#   system init (or any line's session_id)  -> only sets sessionID
#   assistant, first line of a message id   -> step_finish of the previous
#                                              message, then step_start
#   assistant text / thinking block         -> text / reasoning
#   assistant tool_use block                -> remembered by id (at most 64)
#   user tool_result of a remembered call   -> tool_use (state completed|error)
#   assistant API error (synthetic message) -> error
#   result                                  -> step_finish of the last message
#       carrying what the result counts that earlier step_finish lines did
#       not (model_usage_since_last_result: this process's requests,
#       subagents included; its costUSD is the cost), and error when is_error
#   lines of subagents (parent_tool_use_id set), retries, tasks: nothing
#   end of input with a message not yet finished -> its step_finish
#
# Tokens and cost: an assistant line's usage is the one of message_start
# (input and cache right, output not yet counted), so each message's
# step_finish has those and cost 0; the result's step_finish has the rest.
# Summed, the step_finish lines give each result's totals once; a run killed
# before its result leaves only the per-message counts.  total_cost_usd is
# not used: it is cumulative over the whole session (a --resume run would
# count the earlier runs again).

def o: if type == "object" then . else {} end;
def a: if type == "array" then . else [] end;
def s: if type == "string" then . else null end;
def num: if type == "number" and (isnan | not) and (isinfinite | not)
         then . else 0 end;
def tok: num | if . < 0 then 0 elif . > 1000000000 then 1000000000
               else floor end;
def usd: num | if . < 0 then 0 elif . > 1000 then 1000 else . end;
def cut($n): if type == "string" and length > $n then .[0:$n] else . end;
# a mapped line stays within the runner's --max-line (256 KiB): a string
# of it at most these characters (6 bytes each at worst, escaped)
def cuttext: cut(30000);
def cutout: cut(20000);
def cutin: if type == "object" or type == "array"
           then walk(if type == "string" then cut(3000) else . end)
           else . end;
def httpcode: if type == "number" and . >= 100 and . <= 599 then floor
              else null end;
def nonempty: type == "string" and length > 0;

def z: {input: 0, output: 0, read: 0, write: 0};
def add2($x; $y): {input: ($x.input + $y.input), output: ($x.output + $y.output),
                   read: ($x.read + $y.read), write: ($x.write + $y.write)};
def sub0($x; $y): [$x.input - $y.input, $x.output - $y.output,
                   $x.read - $y.read, $x.write - $y.write]
                  | map(if . < 0 then 0 else . end)
                  | {input: .[0], output: .[1], read: .[2], write: .[3]};
def iszero: .input == 0 and .output == 0 and .read == 0 and .write == 0;

# an Anthropic usage object (snake_case) / a modelUsage entry (camelCase)
def utok: o | {input: (.input_tokens | tok), output: (.output_tokens | tok),
               read: (.cache_read_input_tokens | tok),
               write: (.cache_creation_input_tokens | tok)};
def mtok: o | {input: (.inputTokens | tok), output: (.outputTokens | tok),
               read: (.cacheReadInputTokens | tok),
               write: (.cacheCreationInputTokens | tok)};

def ev($st; $type):
  {type: $type, timestamp: (now * 1000 | floor)}
  + (if $st.sid then {sessionID: $st.sid} else {} end);

def emit($e): .out += [$e];

def stepfin($t; $reason; $cost):
  . as $st
  | emit(ev($st; "step_finish")
         + {part: {type: "step-finish", reason: $reason,
                   tokens: {input: ($t.input | tok), output: ($t.output | tok),
                            reasoning: 0,
                            cache: {read: ($t.read | tok), write: ($t.write | tok)}},
                   cost: $cost}});

# the pending message's step_finish (its message_start counts, cost 0)
def flush:
  if .step == null then .
  else .step as $p
    | stepfin($p.t; (if $p.tool then "tool-calls" else "stop" end); 0)
    | .er = add2(.er; $p.t) | .step = null
  end;

def errev($name; $data): . as $st
  | emit(ev($st; "error") + {error: {name: $name, data: $data}})
  | .lasterr = $data.message;

# Claude's tool input -> OpenCode's names (filePath, oldString, ...)
def ocinput:
  if type == "object" then
    with_entries(.key |= ({"file_path": "filePath", "notebook_path": "filePath",
                           "old_string": "oldString", "new_string": "newString",
                           "replace_all": "replaceAll"}[.] // .))
  else {} end;

# a short title: the path (relative to cwd), the description, the command...
def title($cwd):
  o | ([.file_path, .notebook_path, .path] | map(s) | map(select(. != null))
       | .[0]) as $p
  | if $p != null then
      (if ($cwd | nonempty) and ($p | startswith($cwd + "/"))
       then $p | ltrimstr($cwd + "/") else $p end)
    else ([.description, .command, .pattern, .url, .query, .prompt]
          | map(s) | map(select(. != null)) | .[0]) // ""
    end
  | cut(200);

# a tool_result's content as text
def resulttext:
  if type == "string" then .
  elif type == "array" then
    map(o | if .type == "text" then (.text | s // "")
            elif .type == "tool_reference" then "tool: " + (.tool_name | s // "?")
            else "[" + (.type | s // "content") + "]" end)
    | join("\n")
  elif . == null then ""
  else tojson end;

def remember_call($id; $name; $input):
  (if (.order | length) >= 64
   then .order[0] as $old | .tools |= del(.[$old]) | .order |= .[1:]
   else . end)
  | .tools[$id] = {name: $name, input: $input, start: (now * 1000 | floor)}
  | .order += [$id];

def on_assistant($e):
  ($e.message | o) as $m
  | if $e.is_api_error_message == true
       or ($m.model == "<synthetic>" and ($e.error | type) == "string") then
      ($m.content | a | map(o | .text | s | select(. != null)) | join("\n")) as $t
      | ($e.api_error_status | httpcode) as $code
      | flush
      | errev(if $code == 401 or $code == 403 or $e.error == "authentication_failed"
              then "ProviderAuthError" else "APIError" end;
              {message: (if $t != "" then $t else ($e.error | s // "API error") end
                         | cut(65536))}
              + (if $code != null then {statusCode: $code} else {} end)
              + (if ($e.api_error_type | s) != null
                 then {type: $e.api_error_type} else {} end))
    else
      (($m.id | s) // "?") as $mid
      | (if .step != null and .step.id == $mid then .
         else flush
           | .step = {id: $mid, tool: false, t: ($m.usage | utok)}
           | . as $st | emit(ev($st; "step_start") + {part: {type: "step-start"}})
         end)
      | reduce ($m.content | a)[] as $b0 (.;
          ($b0 | o) as $b
          | if $b.type == "text" and ($b.text | nonempty) then
              . as $st | emit(ev($st; "text") + {part: {type: "text", text: ($b.text | cuttext)}})
            elif $b.type == "thinking" and ($b.thinking | nonempty) then
              . as $st
              | emit(ev($st; "reasoning")
                     + {part: {type: "reasoning", text: ($b.thinking | cuttext)}})
            elif $b.type == "tool_use" and ($b.id | nonempty) then
              remember_call($b.id; ($b.name | s // "tool"); $b.input)
              | .step.tool = true
            else . end)
    end;

def on_user($e):
  reduce (($e.message | o).content | a)[] as $b0 (.;
    ($b0 | o) as $b
    | if $b.type == "tool_result" and ($b.tool_use_id | nonempty)
         and .tools[$b.tool_use_id] != null then
        .tools[$b.tool_use_id] as $c
        | ($b.content | resulttext | cutout) as $out
        | ($b.is_error == true) as $err
        | . as $st
        | emit(ev($st; "tool_use")
               + {part: {type: "tool", tool: ($c.name | ascii_downcase),
                         callID: $b.tool_use_id,
                         state: ({status: (if $err then "error" else "completed" end),
                                  input: ($c.input | ocinput | cutin),
                                  output: $out,
                                  title: ($c.input | title($st.cwd)),
                                  time: {start: $c.start,
                                         end: (now * 1000 | floor)}}
                                 + (if $err then {error: $out} else {} end))}})
        | .tools |= del(.[$b.tool_use_id])
        | .order |= map(select(. != $b.tool_use_id))
      else . end);

def on_result($e):
  ($e.model_usage_since_last_result) as $since
  | (if ($since | type) == "object" then
       {t: ([$since[] | mtok] | reduce .[] as $x (z; add2(.; $x))),
        cost: ([$since[] | o | .costUSD | usd] | add // 0)}
     else
       # no per-result counts (other versions): the result's usage, and the
       # session's cost less what this stream has already counted
       {t: ($e.usage | utok),
        cost: (($e.total_cost_usd | usd) - .cost | if . < 0 then 0 else . end)}
     end) as $r
  | sub0($r.t; .er) as $rest
  | (if .step != null then .step.tool else false end) as $tool
  | (if .step != null or ($rest | iszero | not) or $r.cost > 0
     then stepfin($rest; (if $tool then "tool-calls" else "stop" end); ($r.cost | usd))
          | .cost += ($r.cost | usd)
     else . end)
  | .step = null | .er = z
  | if $e.is_error == true or (($e.subtype | s // "") | startswith("error")) then
      ((if ($e.result | nonempty) then $e.result
        else ($e.errors | a | map(s | select(. != null)) | join("; ")) end)
       | if . == "" then ($e.subtype | s // "the agent failed") else . end
       | cut(65536)) as $msg
      | ($e.api_error_status | httpcode) as $code
      | if $msg == .lasterr then .
        else errev(if $code != null then "APIError" else "UnknownError" end;
                   {message: $msg}
                   + (if $code != null then {statusCode: $code} else {} end)
                   + (if ($e.subtype | s) != null then {subtype: $e.subtype}
                      else {} end))
        end
    else . end
  | .lasterr = null;

def step($e):
  (if ($e.session_id | s) != null and ($e.session_id | test("^[A-Za-z0-9_-]{1,128}$"))
   then .sid = $e.session_id else . end)
  | (if $e.type == "system" and $e.subtype == "init" and ($e.cwd | s) != null
     then .cwd = $e.cwd else . end)
  | if ($e.parent_tool_use_id | s) != null then .   # a subagent's line
    elif $e.type == "assistant" then on_assistant($e)
    elif $e.type == "user" then on_user($e)
    elif $e.type == "result" then on_result($e)
    else . end;

# the stream's end (a null after the last line): the step_finish of a
# message that no result followed (the agent was stopped)
foreach ((inputs | {l: .}), null) as $x (
  {sid: null, cwd: null, tools: {}, order: [], step: null, er: z, cost: 0,
   lasterr: null, out: []};
  .out = []
  | if $x == null then ((try flush catch null) // .)
    else
      ([$x.l | fromjson?] | .[0]) as $e
      | if ($e | type) == "object" then ((try step($e) catch null) // .)
        else . end
    end;
  .out[] | select(type == "object")
)
