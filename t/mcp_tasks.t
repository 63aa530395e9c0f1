#!/usr/bin/perl

# MCP beyond tools (issue 12) against a real Redis, the runner played by
# the test (it writes a run's end and PUBLISHes, as the finish script
# does): the capabilities; task-augmented opencode_run_task and tasks/get,
# tasks/result (a long wait that leaves the worker free, then exactly the
# plain get_result answer with the related-task _meta), tasks/list,
# tasks/cancel of a queued and a running run; resources (templates, list,
# read of the run, its diff and events); completion/complete;
# logging/setLevel.  Hostile input: another tenant's taskId, runId or
# resource is "not found" and changes nothing; bad cursors, wrong types
# and huge params are refused.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(json_encode now_ms);
use SMCP::UI;

my $t = SMCP::Test->new(
    workers  => 1,      # one worker: a waiting tasks/result must not hold it
    location => q{
            sandbox_mcp_run_timeout_max 2h;
            sandbox_mcp_retention 1d;
            sandbox_mcp_ui_heartbeat 1s;},
);
$t->start;

my $P = 'smcp:';
my ($sid, $init) = $t->initialize;
ok($sid, 'MCP session') or SMCP::Test::give_up('no MCP session');

my $bob_tok = $t->token(sub => 'bob');
my ($bob_sid) = $t->initialize(token => $bob_tok);

sub rpc {
    my ($method, $params, %o) = @_;
    my $r = $t->rpc($o{sid} // $sid, $method, $params, %o);
    return $r->{json} // { error => { message => "HTTP $r->{status}: $r->{body}" } };
}

sub err_code { my ($j) = @_; return ref $j->{error} eq 'HASH' ? $j->{error}{code} // 0 : 0 }

sub task_call {
    my ($args, %o) = @_;
    return rpc('tools/call', { name => 'opencode_run_task', arguments => $args,
                               task => $o{task} // { ttl => 60000 } }, %o);
}

my $ISO = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;
my $TTL = (2 * 3600 + 86400) * 1000;

# the runner's part: the run ends (the finish script's fields), PUBLISH
sub finish_run {
    my ($run, $status, %f) = @_;
    $t->redis('HSET', "${P}run:$run", status => $status,
              finished_at => now_ms(), %f);
    $t->redis('PUBLISH', "${P}run:$run", $status);
}

###############################################################################
# capabilities and the tool's flag

{
    my $r = $t->mcp_post($t->request_msg('initialize', {
        protocolVersion => '2025-11-25', capabilities => {},
        clientInfo => { name => 'caps', version => '1' } }));
    my $caps = $r->{json}{result}{capabilities} || {};
    is_deeply($caps->{tasks}, { list => {}, cancel => {},
                                requests => { tools => { call => {} } } },
              'capabilities.tasks: list, cancel, requests.tools.call');
    is_deeply($caps->{resources}, { subscribe => JSON::PP::true(), listChanged => JSON::PP::false() },
              'capabilities.resources: subscribe');
    ok(ref $caps->{logging} eq 'HASH', 'capabilities.logging');
    ok(ref $caps->{completions} eq 'HASH', 'capabilities.completions');

    my $tools = rpc('tools/list', {})->{result}{tools} || [];
    my %exec = map { $_->{name} => ($_->{execution} || {})->{taskSupport} } @$tools;
    is($exec{opencode_run_task}, 'optional', 'opencode_run_task: taskSupport optional');
    is(scalar(grep { defined $exec{$_} } keys %exec), 1, 'no other tool has execution');
}

###############################################################################
# task-augmented tools/call

my ($task1, $run1);
{
    my $t0 = time;
    my $j = task_call({ task => 'task one', title => 'One' });
    $task1 = ($j->{result} || {})->{task} || {};
    $run1 = $task1->{taskId} // '';
    like($run1, qr/^run_[0-9a-f]{24}$/, 'CreateTaskResult: taskId is a runId')
        or diag(json_encode($j));
    is($task1->{status}, 'working', 'status working');
    like($task1->{createdAt} // '', $ISO, 'createdAt ISO-8601');
    is($task1->{lastUpdatedAt}, $task1->{createdAt}, 'lastUpdatedAt = createdAt');
    is($task1->{ttl}, $TTL, 'ttl = (run_timeout_max + retention) ms');
    is($task1->{pollInterval}, 1000, 'pollInterval 1000 ms');
    ok(!exists $j->{result}{content}, 'no tool content: a task, not a result');
    like($j->{result}{_meta}{'io.modelcontextprotocol/model-immediate-response'} // '',
         qr/sandbox/, 'model-immediate-response meta');
    is($t->redis('HGET', "${P}run:$run1", 'status'), 'started', 'the run exists, started');
    is($t->redis('HGET', "${P}run:$run1", 'tenant'), 'alice', "the tenant's run");
}

{
    my $before = $t->redis('DBSIZE');
    my $j = task_call({});
    is(err_code($j), -32602, 'task call with invalid arguments: -32602');
    like($j->{error}{message} // '', qr/task/i, 'saying what is wrong');
    is($t->redis('DBSIZE'), $before, 'nothing written');

    $j = task_call({ task => 'x' }, task => 'now');
    is(err_code($j), -32602, 'task that is not an object: -32602');
    is($t->redis('DBSIZE'), $before, 'nothing written');

    $j = rpc('tools/call', { name => 'opencode_get_result',
                             arguments => { runId => $run1 }, task => {} });
    is(err_code($j), -32601, 'task-augmented call of a forbidden tool: -32601');

    # the plain call stays as it was
    my $res = $t->call_tool($sid, 'opencode_get_result', { runId => $run1 });
    is(SMCP::Test::sc($res)->{status}, 'started', 'plain tools/call unchanged');
}

###############################################################################
# tasks/get, tasks/list

{
    my $g = rpc('tasks/get', { taskId => $run1 })->{result} || {};
    is($g->{taskId}, $run1, 'tasks/get: the task, flat');
    is($g->{status}, 'working', 'working (the run is started)');
    is($g->{statusMessage}, 'started', 'statusMessage: the run status');
    is($g->{ttl}, $TTL, 'ttl');

    $t->redis('HSET', "${P}run:$run1", status => 'running', started_at => now_ms());
    $g = rpc('tasks/get', { taskId => $run1 })->{result} || {};
    is($g->{status}, 'working', 'running: working');
    isnt($g->{lastUpdatedAt}, $g->{createdAt}, 'lastUpdatedAt: the start');
    $t->redis('HSET', "${P}run:$run1", status => 'started');
    $t->redis('HDEL', "${P}run:$run1", 'started_at');
}

my ($task2) = (task_call({ task => 'task two' })->{result} || {})->{task};
my $run2 = $task2->{taskId};
{
    my $l = rpc('tasks/list', {})->{result} || {};
    my @ids = map { $_->{taskId} } @{ $l->{tasks} || [] };
    is_deeply([ @ids[0, 1] ], [ $run2, $run1 ], 'tasks/list: the tenant\'s, newest first');
    ok(!grep({ !defined $_->{status} || !defined $_->{ttl} } @{ $l->{tasks} }),
       'each with status and ttl');

    my $bl = rpc('tasks/list', {}, sid => $bob_sid, token => $bob_tok)->{result} || {};
    is_deeply($bl->{tasks}, [], "bob's tasks/list: none of alice's");

    is(err_code(rpc('tasks/list', { cursor => 'bm9wZQ' })), -32602, 'bad cursor: -32602');
    is(err_code(rpc('tasks/list', { cursor => 'x' x 100000 })), -32602, 'huge cursor: -32602');
    is(err_code(rpc('tasks/list', { cursor => 5 })), -32602, 'cursor not a string: -32602');
}

###############################################################################
# hostile: another tenant's taskId, bad ids

{
    my $snap = json_encode($t->redis_hgetall("${P}run:$run1"));
    for my $m (qw(tasks/get tasks/result tasks/cancel)) {
        my $j = rpc($m, { taskId => $run1 }, sid => $bob_sid, token => $bob_tok);
        is(err_code($j), -32602, "bob's $m on alice's task: -32602");
        like($j->{error}{message} // '', qr/not found/i, '"not found", as for none');
    }
    is(json_encode($t->redis_hgetall("${P}run:$run1")), $snap, "alice's run unchanged");

    my $none = 'run_' . ('0' x 24);
    is(err_code(rpc('tasks/get', { taskId => $none })), -32602, 'unknown taskId: -32602');
    is(err_code(rpc('tasks/get', { taskId => 'x' x 200000 })), -32602, 'huge taskId: -32602');
    is(err_code(rpc('tasks/get', { taskId => ['a'] })), -32602, 'taskId not a string: -32602');
    is(err_code(rpc('tasks/get', {})), -32602, 'no taskId: -32602');
    is(err_code(rpc('tasks/get', [1, 2])), -32602, 'params not an object: -32602');
    is(err_code(rpc('tasks/nope', { taskId => $run1 })), -32601, 'unknown tasks/ method: -32601');
}

###############################################################################
# tasks/result waits without holding the worker, then the final answer

{
    my $p = $t->mcp_start($t->request_msg('tasks/result', { taskId => $run1 }),
                          session => $sid);
    ok($t->wait_long_polls(1), 'tasks/result waits');
    my $ping = $t->rpc($sid, 'ping', {});
    is_deeply($ping->{json}{result}, {}, 'the one worker answers a ping meanwhile');
    my $g = rpc('tasks/get', { taskId => $run1 })->{result} || {};
    is($g->{status}, 'working', 'and tasks/get');

    finish_run($run1, 'completed', result => 'done: one', exit_code => 0);
    my $r = $t->mcp_finish($p, 20);
    my $res = ($r->{json} || {})->{result} || {};
    is($res->{structuredContent}{status}, 'completed', 'tasks/result: the ended run')
        or diag($r->{body});
    is($res->{structuredContent}{result}, 'done: one', 'its result');
    ok(!$res->{isError}, 'not isError');
    is_deeply($res->{_meta}, { 'io.modelcontextprotocol/related-task' => { taskId => $run1 } },
              'related-task _meta');

    my $plain = $t->call_tool($sid, 'opencode_get_result', { runId => $run1 });
    my ($a, $b) = (SMCP::Test::sc($plain), $res->{structuredContent});
    delete $_->{watchUrl} for $a, $b;           # a fresh token in each
    is_deeply($b, $a, 'exactly the plain get_result answer');

    $g = rpc('tasks/get', { taskId => $run1 })->{result} || {};
    is($g->{status}, 'completed', 'tasks/get: completed');
    is($g->{lastUpdatedAt}, $plain->{structuredContent}{finishedAt}, 'lastUpdatedAt: the end');

    my $j = rpc('tasks/cancel', { taskId => $run1 });
    is(err_code($j), -32602, 'tasks/cancel of a completed task: -32602');
    is($t->redis('HGET', "${P}run:$run1", 'status'), 'completed', 'still completed');
}

{
    my $p = $t->mcp_start($t->request_msg('tasks/result', { taskId => $run2 }),
                          session => $sid);
    ok($t->wait_long_polls(1), 'tasks/result waits');
    finish_run($run2, 'failed', error => 'tests failed');
    my $res = ($t->mcp_finish($p, 20)->{json} || {})->{result} || {};
    ok($res->{isError}, 'a failed run: tasks/result isError');
    my $g = rpc('tasks/get', { taskId => $run2 })->{result} || {};
    is($g->{status}, 'failed', 'tasks/get: failed');
    is($g->{statusMessage}, 'tests failed', 'statusMessage: the error');
}

###############################################################################
# tasks/cancel really stops the run

{
    my $run = (task_call({ task => 'to cancel' })->{result} || {})->{task}{taskId};
    my $c = rpc('tasks/cancel', { taskId => $run })->{result} || {};
    is($c->{status}, 'cancelled', 'tasks/cancel of a queued run: cancelled');
    is($t->redis('HGET', "${P}run:$run", 'status'), 'cancelled', 'the run is cancelled');
    is($t->redis('SISMEMBER', "${P}tenant:alice:started", $run), 0, 'out of the queue count');
    my $res = rpc('tasks/result', { taskId => $run })->{result} || {};
    ok($res->{isError}, 'tasks/result at once: isError');
    is($res->{structuredContent}{status}, 'cancelled', 'status cancelled');

    # a running one: the runner is told (cancel_requested, PUBLISH cancel)
    $run = (task_call({ task => 'running one' })->{result} || {})->{task}{taskId};
    $t->redis('HSET', "${P}run:$run", status => 'running', started_at => now_ms());
    $c = rpc('tasks/cancel', { taskId => $run })->{result} || {};
    is($c->{status}, 'cancelled', 'tasks/cancel of a running run: cancelled');
    like($c->{statusMessage} // '', qr/cancel requested/, 'statusMessage: being stopped');
    is($t->redis('HGET', "${P}run:$run", 'cancel_requested'), '1', 'cancel_requested set');
    is(rpc('tasks/get', { taskId => $run })->{result}{status}, 'cancelled',
       'tasks/get: cancelled from then on');
    finish_run($run, 'cancelled');
}

###############################################################################
# progress: a waiting call with _meta.progressToken answers as SSE

{
    my $run = (task_call({ task => 'with progress' })->{result} || {})->{task}{taskId};
    my $bob_run = (task_call({ task => 'bob progress' }, sid => $bob_sid,
                             token => $bob_tok)->{result} || {})->{task}{taskId};
    my $ev = sub {
        my ($r, $type, $data) = @_;
        $t->redis('XADD', "${P}run:$r:events", '*', type => $type,
                  data => json_encode($data), ts => now_ms());
    };
    $ev->($run, 'lifecycle', { step => 'clone' });
    $ev->($bob_run, 'agent', { type => 'tool_use', part => { tool => 'bash',
          state => { input => { command => 'cat /secret-of-bob' } } } });

    # bob's progress on alice's run: not found, as JSON, no event of it
    my $br = $t->rpc($bob_sid, 'tools/call', { name => 'opencode_get_result',
                     arguments => { runId => $run, waitSeconds => 5 },
                     _meta => { progressToken => 'b' } }, token => $bob_tok);
    like($br->{headers}{'content-type'} // '', qr{application/json}, "bob on alice's run: JSON");
    ok($br->{json}{result}{isError}, 'run not found');

    my $p = $t->mcp_start($t->request_msg('tools/call', {
        name => 'opencode_get_result', arguments => { runId => $run, waitSeconds => 20 },
        _meta => { progressToken => 'tok-1' } }), session => $sid);
    ok($t->wait_long_polls(1), 'the call with a progressToken waits');
    $ev->($run, 'agent', { type => 'step_start', part => {} });
    $ev->($run, 'agent', { type => 'tool_use', part => { tool => 'bash',
          state => { input => { command => 'npm test' } } } });
    $t->redis('PUBLISH', "${P}run:$run", 'event');
    # the rest comes after the first step went out: a second wake
    ok($t->http_read_until($p, qr/ran `npm test`/), 'the first step is sent as it comes');
    $ev->($run, 'agent', { type => 'tool_use', part => { tool => 'write',
          state => { input => { filePath => '/workspace/repo/a.js' } } } });
    $ev->($run, 'lifecycle', { step => 'push_failed', message => 'no' });
    $ev->($run, 'agent', { type => 'text', part => { text => 'done' } });
    finish_run($run, 'completed', result => 'ok');
    my $r = $t->mcp_finish($p, 25);
    like($r->{headers}{'content-type'} // '', qr{text/event-stream}, 'the answer is an SSE stream');
    my @m = @{ $r->{sse} || [] };
    my @prog = map { $_->{params} } grep { ($_->{method} // '') eq 'notifications/progress' } @m;
    is_deeply([ map { $_->{progress} } @prog ], [1, 2, 3], 'progress 1, 2, 3: one per agent step');
    is_deeply([ map { $_->{message} } @prog ],
              [ 'ran `npm test`', 'write /workspace/repo/a.js', 'replied' ], 'what each did');
    ok(!grep({ ($_->{progressToken} // '') ne 'tok-1' } @prog), 'with the request\'s token');
    my @log = map { $_->{params} } grep { ($_->{method} // '') eq 'notifications/message' } @m;
    is_deeply([ map { [$_->{level}, $_->{data}{event}{step} // $_->{data}{event}{status}] } @log ],
              [ ['info', 'started'], ['info', 'clone'], ['error', 'push_failed'] ],
              'lifecycle lines as log messages (info; error for a failure)');
    is($log[0]{data}{runId}, $run, 'naming the run');
    ok(exists $m[-1]{result}, 'the result comes last');
    is($m[-1]{result}{structuredContent}{status}, 'completed', 'the ended run');
    unlike($r->{body}, qr/secret-of-bob/, "nothing of bob's run");

    # logging/setLevel error: only the failed step; a task's result streams too
    is_deeply(rpc('logging/setLevel', { level => 'error' })->{result}, {}, 'setLevel error');
    is($t->redis('TTL', "${P}mcp:$sid:log") > 0 ? 1 : 0, 1, 'the level is kept with a TTL');
    my $run3 = (task_call({ task => 'three' })->{result} || {})->{task}{taskId};
    $p = $t->mcp_start($t->request_msg('tasks/result', { taskId => $run3,
                                                        _meta => { progressToken => 7 } }),
                       session => $sid);
    ok($t->wait_long_polls(1), 'tasks/result with a progressToken waits');
    $ev->($run3, 'lifecycle', { step => 'clone' });
    $ev->($run3, 'lifecycle', { step => 'clone_failed' });
    finish_run($run3, 'failed', error => 'clone failed');
    $r = $t->mcp_finish($p, 25);
    @m = @{ $r->{sse} || [] };
    is_deeply([ map { $_->{params}{data}{event}{step} } grep { ($_->{method} // '') eq 'notifications/message' } @m ],
              [ 'clone_failed' ], 'at level error: the failure only');
    is_deeply($m[-1]{result}{_meta}, { 'io.modelcontextprotocol/related-task' => { taskId => $run3 } },
              'tasks/result with a progressToken: streamed, the related task last');

    # issue 25, point 5: a session that set a level hears the lifecycle
    # without a progressToken: on tasks/result (while the run goes on, and
    # of a run that ended) and on a waiting get_result; no progress
    # notifications (no token); a session without a level: JSON as before
    is_deeply(rpc('logging/setLevel', { level => 'info' })->{result}, {}, 'setLevel info');
    my $run4 = (task_call({ task => 'four' })->{result} || {})->{task}{taskId};
    $p = $t->mcp_start($t->request_msg('tasks/result', { taskId => $run4 }), session => $sid);
    ok($t->wait_long_polls(1), 'tasks/result without a progressToken waits');
    $ev->($run4, 'lifecycle', { step => 'clone' });
    $ev->($run4, 'agent', { type => 'tool_use', part => { tool => 'bash',
          state => { input => { command => 'make' } } } });
    $t->redis('PUBLISH', "${P}run:$run4", 'event');
    ok($t->http_read_until($p, qr/"clone"/), '... its lifecycle line is sent as it comes');
    $ev->($run4, 'lifecycle', { step => 'agent_exit', exitCode => 0 });
    finish_run($run4, 'completed', result => 'four done');
    $r = $t->mcp_finish($p, 25);
    like($r->{headers}{'content-type'} // '', qr{text/event-stream},
         'tasks/result without a token, the session at info: a stream');
    @m = @{ $r->{sse} || [] };
    is_deeply([ map { $_->{params}{data}{event}{step} // $_->{params}{data}{event}{status} }
                grep { ($_->{method} // '') eq 'notifications/message' } @m ],
              [ 'started', 'clone', 'agent_exit' ], '... the run\'s lifecycle as log messages');
    is(scalar(grep { ($_->{method} // '') eq 'notifications/progress' } @m), 0,
       '... no progress (no token)');
    is_deeply([ map { $_->{params}{_meta}{'io.modelcontextprotocol/related-task'}{taskId} // '' }
                grep { ($_->{method} // '') eq 'notifications/message' } @m ],
              [ ($run4) x 3 ], '... each naming its task (related-task)');
    is($m[-1]{result}{structuredContent}{result}, 'four done', '... the result last');

    # tasks/result of the run that ended: its lifecycle again, then the result
    $r = $t->rpc($sid, 'tasks/result', { taskId => $run4 });
    @m = @{ $r->{sse} || [] };
    is_deeply([ map { $_->{params}{data}{event}{step} // $_->{params}{data}{event}{status} }
                grep { ($_->{method} // '') eq 'notifications/message' } @m ],
              [ 'started', 'clone', 'agent_exit' ],
              'tasks/result of an ended run: its lifecycle, as the SDK asks after the end');
    is($m[-1]{result}{structuredContent}{status}, 'completed', '... then the result');

    # the same session: get_result of an ended run stays JSON (a poll)
    $r = $t->rpc($sid, 'tools/call', { name => 'opencode_get_result',
                 arguments => { runId => $run4, waitSeconds => 5 } });
    like($r->{headers}{'content-type'} // '', qr{application/json},
         'get_result of an ended run: JSON at once, even with a level');
    # bob set no level: his waiting call without a token answers JSON
    my $bob4 = (task_call({ task => 'bob four' }, sid => $bob_sid,
                          token => $bob_tok)->{result} || {})->{task}{taskId};
    $p = $t->mcp_start($t->request_msg('tools/call', { name => 'opencode_get_result',
        arguments => { runId => $bob4, waitSeconds => 20 } }), session => $bob_sid,
        token => $bob_tok);
    ok($t->wait_long_polls(1), 'a call without a token, in a session without a level, waits');
    finish_run($bob4, 'completed');
    $r = $t->mcp_finish($p, 25);
    like($r->{headers}{'content-type'} // '', qr{application/json}, '... and answers JSON');
    is($r->{json}{result}{structuredContent}{status}, 'completed', '... the ended run');
    is_deeply(rpc('logging/setLevel', { level => 'error' })->{result}, {}, 'setLevel error again');

    # an ended run answers at once, as JSON
    $r = $t->rpc($sid, 'tools/call', { name => 'opencode_get_result',
                 arguments => { runId => $run, waitSeconds => 5 }, _meta => { progressToken => 'x' } });
    like($r->{headers}{'content-type'} // '', qr{application/json}, 'an ended run: JSON at once');
    $r = $t->rpc($sid, 'tools/call', { name => 'opencode_get_result',
                 arguments => { runId => $bob_run, waitSeconds => 1 },
                 _meta => { progressToken => { bad => 1 } } }, token => $bob_tok, session => $bob_sid);
    like($r->{headers}{'content-type'} // '', qr{application/json}, 'a token of the wrong type: JSON');
    $r = $t->rpc($sid, 'tools/call', { name => 'opencode_get_result',
                 arguments => { runId => $bob_run, waitSeconds => 1 },
                 _meta => { progressToken => 'x' x 300 } }, token => $bob_tok, session => $bob_sid);
    like($r->{headers}{'content-type'} // '', qr{application/json}, 'a token over 256 bytes: JSON');
    finish_run($bob_run, 'cancelled');
}

###############################################################################
# notifications/cancelled stops a waiting request, not the run

{
    my $run = (task_call({ task => 'to wait on' })->{result} || {})->{task}{taskId};
    my $bob_run = (task_call({ task => 'bob waits' }, sid => $bob_sid,
                             token => $bob_tok)->{result} || {})->{task}{taskId};
    my $wait = sub {
        my ($id, %o) = @_;
        return $t->mcp_start({ jsonrpc => '2.0', id => $id, method => 'tools/call',
                               params => { name => 'opencode_get_result',
                                           arguments => { runId => $o{run} // $run,
                                                          waitSeconds => 30 },
                                           %{ $o{params} || {} } } },
                             session => $o{sid} // $sid, %{ $o{http} || {} });
    };
    my $cancel = sub {
        my ($id, %o) = @_;
        return $t->mcp_post({ jsonrpc => '2.0', method => 'notifications/cancelled',
                              params => { requestId => $id, reason => 'enough' } },
                            session => $o{sid} // $sid, %{ $o{http} || {} });
    };

    my $p1 = $wait->('w-1');
    my $p2 = $wait->(77);
    my $pb = $wait->('w-1', run => $bob_run, sid => $bob_sid, http => { token => $bob_tok });
    ok($t->wait_long_polls(3), 'three calls wait');
    my $t0 = time;
    is($cancel->('w-1')->{status}, 202, 'notifications/cancelled: 202');
    my $r = $t->mcp_finish($p1, 45);
    is($r->{status}, 200, 'the cancelled wait ends');
    ok(time - $t0 < 20, sprintf('at once (%.2f s), not at the end of its 30 s', time - $t0));
    is_deeply($r->{sse} // [], [], 'with no JSON-RPC answer');
    is($t->redis('HGET', "${P}run:$run", 'status'), 'started', 'the run goes on');

    # a wait that streams progress: it ends after what it sent
    my $pp = $wait->('w-2', params => { _meta => { progressToken => 'pt' } });
    ok($t->wait_long_polls(3), 'it waits (with the two still waiting)');
    $t->redis('XADD', "${P}run:$run:events", '*', type => 'agent',
              data => json_encode({ type => 'tool_use', part => { tool => 'bash',
                                    state => { input => { command => 'make' } } } }),
              ts => now_ms());
    $t->redis('PUBLISH', "${P}run:$run", 'event');
    ok($t->http_read_until($pp, qr/ran `make`/), 'its progress is sent');
    $cancel->('w-2');
    $r = $t->mcp_finish($pp, 20);
    my @pm = @{ $r->{sse} || [] };
    is_deeply([ map { $_->{params}{message} // () } @pm ], [ 'ran `make`' ],
              'a progress stream cancelled: what it sent ...');
    ok(!grep({ exists $_->{result} || exists $_->{error} } @pm), '... and no answer');

    is($cancel->(78)->{status}, 202, 'an unknown requestId: 202, nothing happens');
    is($cancel->({ x => 1 })->{status}, 202, 'a requestId of the wrong type: 202, nothing happens');
    is($cancel->('x' x 100000)->{status}, 202, 'a huge requestId: 202, nothing happens');
    $cancel->('"77"');
    finish_run($run, 'completed');
    $r = $t->mcp_finish($p2, 20);
    # (the session set a level: the answer is a stream's last message)
    is((($r->{json} // ($r->{sse} || [])->[-1] // {})->{result} || {})->{structuredContent}{status},
       'completed', 'another request of the session (id 77, not "77") still answered');
    finish_run($bob_run, 'completed');
    $r = $t->mcp_finish($pb, 20);
    is($r->{json}{result}{structuredContent}{status}, 'completed',
       "bob's request of the same id, waiting meanwhile: not cancelled by alice's notification");
}

###############################################################################
# resources

{
    my $tl = rpc('resources/templates/list', {})->{result}{resourceTemplates} || [];
    is_deeply([ map { $_->{uriTemplate} } @$tl ],
              [ 'opencode://runs/{runId}', 'opencode://runs/{runId}/diff',
                'opencode://runs/{runId}/events' ], 'resource templates');

    my $l = rpc('resources/list', {})->{result} || {};
    my %uris = map { $_->{uri} => $_ } @{ $l->{resources} || [] };
    ok($uris{"opencode://runs/$run1"}, 'resources/list: the tenant\'s runs');
    is($uris{"opencode://runs/$run1"}{title}, 'One', 'titled');
    my $bl = rpc('resources/list', {}, sid => $bob_sid, token => $bob_tok)->{result}{resources} || [];
    ok(!grep({ $_->{uri} =~ /\Q$run1\E|\Q$run2\E/ } @$bl), "bob's resources/list: none of alice's");
    is(err_code(rpc('resources/list', { cursor => 'garbage!' })), -32602, 'bad cursor: -32602');

    $t->redis('SET', "${P}run:$run1:diff", "diff --git a/x b/x\n+hi\n");
    $t->redis('XADD', "${P}run:$run1:events", '*', type => 'lifecycle',
              data => '{"step":"clone"}', ts => now_ms());

    my $c = rpc('resources/read', { uri => "opencode://runs/$run1" })->{result}{contents} || [];
    is($c->[0]{uri}, "opencode://runs/$run1", 'read the run');
    is($c->[0]{mimeType}, 'application/json', 'as JSON');
    like($c->[0]{text} // '', qr/"status":"completed"/, 'the run object');
    $c = rpc('resources/read', { uri => "opencode://runs/$run1/diff" })->{result}{contents} || [];
    is($c->[0]{text}, "diff --git a/x b/x\n+hi\n", 'read the diff');
    is($c->[0]{mimeType}, 'text/x-diff', 'as a diff');
    $c = rpc('resources/read', { uri => "opencode://runs/$run1/events" })->{result}{contents} || [];
    like($c->[0]{text} // '', qr/"clone"/, 'read the events');

    for my $uri ("opencode://runs/$run1/nope", "opencode://runs/run_zz",
                 'file:///etc/passwd',
                 'opencode://runs/' . ('a' x 100000)) {
        my $j = rpc('resources/read', { uri => $uri });
        is(err_code($j), -32002, 'unknown resource: -32002 (' . substr($uri, 0, 40) . ')');
    }
    is(err_code(rpc('resources/read', { uri => "opencode://runs/$run1" },
                    sid => $bob_sid, token => $bob_tok)), -32002,
       "bob reads alice's run: -32002, like none");
    is(err_code(rpc('resources/read', {})), -32602, 'no uri: -32602');
}

###############################################################################
# subscriptions and the session's GET stream, resumed with Last-Event-ID

{
    my $ui = SMCP::UI->new($t);
    my $open = sub {
        my (%o) = @_;
        my $st = $ui->sse('/mcp', headers => [
            'Authorization: Bearer ' . ($o{token} // $t->token),
            'Mcp-Session-Id: ' . ($o{sid} // $sid), @{ $o{headers} || [] } ],
            (defined $o{last_id} ? (last_id => $o{last_id}) : ()));
        $st->pump(10, sub { @{ $_[0]->events } >= 1 || $_[0]->closed });
        return $st;
    };
    my $updates = sub {
        my ($st) = @_;
        return [ map { $_->{json}{params}{uri} }
                 grep { ($_->{json}{method} // '') eq 'notifications/resources/updated' }
                 @{ $st->events } ];
    };
    my $status = sub {
        my ($run, $status, %f) = @_;
        $t->redis('HSET', "${P}run:$run", status => $status, %f);
        $t->redis('PUBLISH', "${P}tenant:alice", "$run $status");
    };

    my $r = $t->http(method => 'GET', path => '/mcp', headers => [
        Accept => 'text/event-stream', Authorization => 'Bearer ' . $t->token ]);
    is($r->{status}, 400, 'GET without a session: 400');
    $r = $t->http(method => 'GET', path => '/mcp', headers => [
        Accept => 'application/json', Authorization => 'Bearer ' . $t->token,
        'Mcp-Session-Id' => $sid ]);
    is($r->{status}, 406, 'GET not accepting text/event-stream: 406');
    $r = $t->http(method => 'GET', path => '/mcp', headers => [
        Accept => 'text/event-stream', Authorization => 'Bearer ' . $bob_tok,
        'Mcp-Session-Id' => $sid ]);
    is($r->{status}, 404, "GET on another tenant's session: 404");

    my $ra = (task_call({ task => 'watched' })->{result} || {})->{task}{taskId};
    # (the other run: another MCP session's of the same tenant)
    my $sid_b = $t->initialize;
    my $rb = (task_call({ task => 'not watched' }, sid => $sid_b)->{result} || {})->{task}{taskId};
    my $ua = "opencode://runs/$ra";
    is_deeply(rpc('resources/subscribe', { uri => $ua })->{result}, {}, 'resources/subscribe');
    is_deeply(rpc('resources/subscribe', { uri => "$ua/diff" })->{result}, {}, '... and its diff');
    is(err_code(rpc('resources/subscribe', { uri => $ua }, sid => $bob_sid, token => $bob_tok)),
       -32002, "bob subscribes to alice's run: -32002");
    is(err_code(rpc('resources/subscribe', { uri => 'opencode://runs/run_' . ('0' x 24) })),
       -32002, 'an unknown run: -32002');
    is(err_code(rpc('resources/subscribe', { uri => 'http://x/' })), -32002, 'another URI: -32002');
    is(err_code(rpc('resources/subscribe', { uri => 'x' x 100000 })), -32002, 'a huge one: -32002');
    is(err_code(rpc('resources/subscribe', {})), -32602, 'no uri: -32602');
    is_deeply([ sort @{ $t->redis('SMEMBERS', "${P}mcp:$sid:subs") } ], [ $ua, "$ua/diff" ],
              'the subscriptions, in Redis');
    ok($t->redis('TTL', "${P}mcp:$sid:subs") > 0, 'expiring');

    rpc('logging/setLevel', { level => 'info' });
    my $s1 = $open->();
    is($s1->status, 200, 'GET with the session: 200');
    like($s1->headers->{'content-type'} // '', qr{^text/event-stream}, 'an event stream');
    my $prime = $s1->events->[0] || {};
    like($prime->{id} // '', qr/^\d{13}$/, 'first: an id (ms) ...');
    is($prime->{data} // '', '', '... and no data');

    my $sb = $open->(sid => $bob_sid, token => $bob_tok);
    $status->($rb, 'running', started_at => now_ms());
    $status->($ra, 'running', started_at => now_ms());
    $s1->pump(10, sub { @{ $updates->($_[0]) } >= 2 });
    is_deeply([ sort @{ $updates->($s1) } ], [ $ua, "$ua/diff" ],
              'a status change: notifications/resources/updated for each subscribed URI, not the other run');
    $s1->pump(10, sub { grep { ($_->{json}{method} // '') eq 'notifications/message' } @{ $_[0]->events } });
    is_deeply([ map { $_->{json}{params} } grep { ($_->{json}{method} // '') eq 'notifications/message' }
                @{ $s1->events } ],
              [ { level => 'info', logger => 'run', data => { runId => $ra, status => 'running' } } ],
              'and the status change as a log line, once (the other run: none)');

    # a run this session starts and does not subscribe to: its lifecycle
    # as log lines all the same (issue 25, point 5), no update
    my $logs = sub {
        return [ map { $_->{json}{params}{data} }
                 grep { ($_->{json}{method} // '') eq 'notifications/message' }
                 @{ $_[0]->events } ];
    };
    my $rc = (task_call({ task => 'started here' })->{result} || {})->{task}{taskId};
    $status->($rc, 'running', started_at => now_ms());
    $s1->pump(10, sub { grep { ($_->{runId} // '') eq ($rc // '') && $_->{status} eq 'running' }
                             @{ $logs->($_[0]) } });
    is_deeply([ grep { ($_->{runId} // '') eq ($rc // '') } @{ $logs->($s1) } ],
              [ { runId => $rc, status => 'started' }, { runId => $rc, status => 'running' } ],
              'a run the session started, not subscribed: started, then running, as log lines');
    ok(!grep({ index($_, $rc // 'none') >= 0 } @{ $updates->($s1) }),
       '... and no notifications/resources/updated for it');
    # two changes heard at once (one EVAL, one read of the channel): the
    # second arrives while the session's sets are being read for the first;
    # each is a line of its own
    my $rd = (task_call({ task => 'quick' })->{result} || {})->{task}{taskId};
    $t->redis('EVAL', "redis.call('PUBLISH', KEYS[1], ARGV[1]) "
              . "redis.call('PUBLISH', KEYS[1], ARGV[2])", 1,
              "${P}tenant:alice", "$rd running", "$rd completed");
    $s1->pump(10, sub { grep { ($_->{runId} // '') eq ($rd // '') && $_->{status} eq 'completed' }
                             @{ $logs->($_[0]) } });
    is_deeply([ map { $_->{status} } grep { ($_->{runId} // '') eq ($rd // '') } @{ $logs->($s1) } ],
              [ qw(started running completed) ],
              'two changes heard in one read: a log line each, in order');
    ok(defined $t->redis('ZSCORE', "${P}mcp:$sid:runs", $rc)
       && $t->redis('TTL', "${P}mcp:$sid:runs") > 0,
       'the session\'s runs, in Redis, expiring');
    ok(!defined $t->redis('ZSCORE', "${P}mcp:$sid:runs", $rb),
       '... not the other session\'s run');
    my @ids = map { $_->{id} // () } @{ $s1->events };
    ok(!grep({ $ids[$_] <= $ids[$_ - 1] } 1 .. $#ids), 'ids increase');
    $sb->pump(1);
    is_deeply($updates->($sb), [], "bob's stream: nothing of alice's");
    my $last = $ids[-1];
    $s1->close;

    # while away: the run ends; back with Last-Event-ID
    sleep 0.1;
    $status->($ra, 'completed', finished_at => now_ms());
    my $s2 = $open->(last_id => $last);
    $s2->pump(10, sub { @{ $updates->($_[0]) } >= 2 });
    is_deeply([ sort @{ $updates->($s2) } ], [ $ua, "$ua/diff" ],
              'resumed with Last-Event-ID: what changed while away');
    ok(!grep({ defined $_->{id} && $_->{id} <= $last } @{ $s2->events }[1 .. $#{ $s2->events }]),
       'with ids after it');
    for my $bad ('garbage', '9' x 40, '-5') {
        my $sx = $open->(last_id => $bad);
        $sx->pump(1);
        is_deeply($updates->($sx), [], "Last-Event-ID '" . substr($bad, 0, 12) . "': no resume");
        like($sx->events->[0]{id} // '', qr/^\d{13}$/, '... a stream from now');
        $sx->close;
    }
    my $s3 = $open->(last_id => $s2->events->[-1]{id});
    $s3->pump(1);
    is_deeply($updates->($s3), [], 'resumed again from the end: nothing twice');
    $s2->pump(10, sub { $_[0]->closed || $_[0]->ended });
    ok($s2->closed || $s2->ended, 'a newer stream of the session ends the older one');

    is_deeply(rpc('resources/unsubscribe', { uri => "$ua/diff" })->{result}, {}, 'unsubscribe');
    rpc('logging/setLevel', { level => 'warning' });
    $status->($ra, 'completed');
    $s3->pump(10, sub { @{ $updates->($_[0]) } >= 1 });
    is_deeply($updates->($s3), [ $ua ], 'after it: only what is still subscribed');
    ok(!grep({ ($_->{json}{method} // '') eq 'notifications/message' } @{ $s3->events }),
       'at level warning: no info line');
    $s3->pump(10, sub { $_[0]->comments >= 2 });
    ok($s3->comments >= 2, 'a comment each heartbeat (sandbox_mcp_ui_heartbeat)');
    ok(!$s3->closed, 'the stream stays open');
    $s3->close;
    $sb->close;

    # DELETE ends the session's stream and forgets its subscriptions, level
    my ($sid2) = $t->initialize;
    is_deeply(rpc('resources/subscribe', { uri => $ua }, sid => $sid2)->{result}, {},
              'another session subscribes');
    rpc('logging/setLevel', { level => 'debug' }, sid => $sid2);
    task_call({ task => 'a run of the session that ends' }, sid => $sid2);
    is($t->redis('ZCARD', "${P}mcp:$sid2:runs"), 1, '... and starts a run');
    my $s4 = $open->(sid => $sid2);
    is($s4->status, 200, 'its stream');
    my $d = $t->http(method => 'DELETE', path => '/mcp', headers => [
        Authorization => 'Bearer ' . $t->token, 'Mcp-Session-Id' => $sid2 ]);
    is($d->{status}, 200, 'DELETE');
    $s4->pump(10, sub { $_[0]->closed || $_[0]->ended });
    ok($s4->closed || $s4->ended, 'the stream ends with the session');
    is($t->redis('EXISTS', "${P}mcp:$sid2:subs", "${P}mcp:$sid2:log",
                 "${P}mcp:$sid2:runs"), 0,
       'its subscriptions, level and runs are gone');
    $s4->close;
}

###############################################################################
# completions, logging

{
    my $c = rpc('completion/complete', { ref => { type => 'ref/resource',
                                                 uri => 'opencode://runs/{runId}' },
                                        argument => { name => 'runId', value => 'run_' } });
    my $v = $c->{result}{completion}{values} || [];
    ok((grep { $_ eq $run1 } @$v) && (grep { $_ eq $run2 } @$v), 'runId completion: the tenant\'s runs');
    $c = rpc('completion/complete', { ref => { type => 'ref/resource', uri => 'x' },
                                     argument => { name => 'runId', value => $run1 } });
    is_deeply($c->{result}{completion}{values}, [ $run1 ], 'prefix filter');
    my $ses = $t->redis('HGET', "${P}run:$run1", 'session');
    $c = rpc('completion/complete', { ref => { type => 'ref/resource', uri => 'x' },
                                     argument => { name => 'sessionId', value => '' } });
    ok(grep({ $_ eq $ses } @{ $c->{result}{completion}{values} || [] }), 'sessionId completion');
    my %u; $u{$_}++ for @{ $c->{result}{completion}{values} || [] };
    ok(!grep({ $_ > 1 } values %u), 'each once');
    $c = rpc('completion/complete', { ref => { type => 'ref/resource', uri => 'x' },
                                     argument => { name => 'runId', value => 'run_' } },
             sid => $bob_sid, token => $bob_tok);
    ok(!grep({ $_ eq $run1 } @{ $c->{result}{completion}{values} || [] }), "bob: none of alice's");
    $c = rpc('completion/complete', { ref => { type => 'ref/prompt', name => 'p' },
                                     argument => { name => 'other', value => 'x' } });
    is_deeply($c->{result}{completion}, { values => [], total => 0, hasMore => JSON::PP::false() },
              'another argument: no values');
    is(err_code(rpc('completion/complete', { argument => 'x' })), -32602, 'bad params: -32602');

    is_deeply(rpc('logging/setLevel', { level => 'warning' })->{result}, {}, 'logging/setLevel');
    is(err_code(rpc('logging/setLevel', { level => 'loud' })), -32602, 'bad level: -32602');
}

$t->done;
