#!/usr/bin/env perl
# A choice of agent (issue 26, point 3) end to end: Claude Code and Codex,
# each in its own sandbox image (runner/sandbox/build-agent-image) with
# its real binary (@anthropic-ai/claude-code-linux-x64 2.1.328, @openai/
# codex 0.169.0-linux-x64, pinned), behind the same egress as OpenCode,
# against the scripted fakes of their providers' APIs (Anthropic
# Messages; OpenAI Responses).  Everything real but the models and GitHub
# (redis, nginx with the module, the runner, dockerd, the images).  For
# each agent:
#
#   1. a run with agent claude-code on acme/app with createPullRequest: its
#      Bash tool writes hello.txt; completed, the result the model's last
#      text, the diff holds hello.txt, the pull request of opencode/<runId>
#      opened; the timeline has the tool call as OpenCode's (tool_use,
#      completed, its output) and the step's tokens; the model saw the
#      real key (the egress swapped the run token), the sandbox no key
#   2. the session's next run continues Claude Code's conversation (the
#      model's request holds the first run's messages)
#   3. cancel: a run whose model hangs is cancelled, its sandbox gone
#   4. deadline: a run whose model hangs fails at its timeoutSeconds
#
# Needs root, Docker, `make`, redis-server and npm (the agents' packages,
# fetched once into build/cache/agents).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use JSON::PP ();
use Test::More;

use SMCP::Fakes ();
use SMCP::Stack;
use SMCP::Test qw(json_encode wait_until run_cmd prereq_fail);

my $root = SMCP::Test::repo_root();
my $CC_IMAGE = 'smcp-sandbox-claude-code:2.1.328';
my $CX_IMAGE = 'smcp-sandbox-codex:0.169.0';
my $OPENAI_KEY = 'sk-proj-REAL-' . SMCP::Test::rhex();

# the fake Responses API's script: by the marker of the latest task (the
# last user message naming one: a resumed thread carries the earlier
# ones), the step by the tool outputs since
my %CX = (
    CXWRITE => [ { tool_use => { name => 'exec_command', input => {
                     cmd => 'echo hello from codex > hello.txt && echo WROTE' } } },
                 { text => 'Codex wrote hello.txt.' } ],
    CXAGAIN => [ { text => 'Codex still here.' } ],
    CXHANG  => [ { hang => 300 } ],
);
my $openai = SMCP::Fakes::start_openai(key => $OPENAI_KEY, script => [ sub {
    my ($j) = @_;
    my @in = grep { ref $_ eq 'HASH' } @{ $j->{input} || [] };
    my ($at, $mark) = (-1, '');
    for my $i (0 .. $#in) {
        next unless ($in[$i]{role} // '') eq 'user';
        my ($m) = JSON::PP->new->canonical->encode($in[$i]) =~ /SCENARIO-(CX[A-Z]+)/;
        ($at, $mark) = ($i, $m) if $m;
    }
    my $steps = $CX{$mark} or return { text => 'Codex test' };
    my $n = grep { ($_->{type} // '') eq 'function_call_output' } @in[$at + 1 .. $#in];
    return $steps->[$n > $#$steps ? $#$steps : $n];
} ]);

my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-CCWRITE' => [
            { tool_use => { name => 'Bash', input => {
                command => 'echo hello from claude > hello.txt && echo WROTE',
                description => 'Write hello.txt' } } },
            { text => 'I wrote hello.txt.' } ],
        'SCENARIO-CCAGAIN' => [ { text => 'Still here.' } ],
        'SCENARIO-CCHANG' => [ { hang => 300 } ],
    },
    repos => { 'acme/app' => { 'README.md' => "# app\n" },
               # a repository steering Claude Code elsewhere
               'acme/steer' => { 'README.md' => "# steer\n",
                                 '.claude/settings.json' => '{"env":{"ANTHROPIC_BASE_URL":'
                                     . '"http://127.0.0.1:9","API_TIMEOUT_MS":"1"}}' } },
    location => 'sandbox_mcp_agents opencode claude-code codex=openai/gpt-5.5;',
    egress_env => { OPENAI_API_KEY => $OPENAI_KEY, OPENAI_BASE_URL => $openai->url,
                    # the egress meter's prices of both agents' models
                    # (every run has a cap: sandbox_mcp_max_cost_usd)
                    SMCP_EGRESS_PRICES => 'gpt-5*=1.25/10 claude-*=3/15/0.3/3.75' },
);
my $t = $s->t;
my $gh = $s->github;

for ([ 'claude-code', $CC_IMAGE ], [ 'codex', $CX_IMAGE ]) {
    my ($rc, $out, $err) = run_cmd([ "$root/runner/sandbox/build-agent-image", @$_ ],
                                   timeout => 1800);
    prereq_fail("build-agent-image $_->[0] failed: $out$err") if $rc;
}

my $r = $s->start_runner(concurrency => 2,
                         args => [ '--agent-images', "claude-code=$CC_IMAGE,codex=$CX_IMAGE" ]);

subtest 'claude-code writes a file, its diff, its pull request' => sub {
    my $run = $s->run_task(task => 'SCENARIO-CCWRITE: write hello.txt', agent => 'claude-code',
                           repository => 'https://github.com/acme/app',
                           createPullRequest => JSON::PP::true);
    ok($run && $run->{runId}, 'queued') or return diag(json_encode($run));
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed') or return $s->diag_run($run->{runId}, $r);
    is($res->{result}, 'I wrote hello.txt.', "the result: the model's last text");
    like($res->{diffStat} // '', qr/1 file changed/, 'a diffStat');
    my $diff = SMCP::Test::sc($s->call('opencode_get_diff', { runId => $run->{runId} }));
    like($diff->{diff} // '', qr{^\+\+\+ b/hello\.txt$}m, 'the diff: hello.txt')
        or diag(json_encode($diff));
    like($diff->{diff} // '', qr/^\+hello from claude$/m, '... with what the agent wrote');
    my @pulls = $gh->pulls('acme/app');
    my ($p) = grep { $_->{head}{ref} eq "opencode/$run->{runId}" } @pulls;
    ok($p, 'a pull request of opencode/<runId>');
    is($res->{pullRequestUrl}, $p && $p->{html_url}, '... its pullRequestUrl');
    is($gh->file_content('acme/app', "opencode/$run->{runId}", 'hello.txt'),
       "hello from claude\n", '... the branch has hello.txt');

    my @ev = map { $_->{json} || {} } $s->stored_events($run->{runId});
    my ($tool) = grep { ($_->{type} // '') eq 'tool_use' } @ev;
    ok($tool, 'the timeline: a tool_use event') or diag(json_encode(\@ev));
    my $part = $tool ? ($tool->{part} // {}) : {};
    is($part->{tool}, 'bash', "... Claude Code's Bash as OpenCode's bash");
    is($part->{state}{status}, 'completed', '... completed');
    like($part->{state}{output} // '', qr/WROTE/, '... its output');
    ok(scalar(grep { ($_->{type} // '') eq 'step_finish' } @ev), '... and a step_finish');
    my $h = $s->run_hash($run->{runId});
    ok(($h->{tokens_output} // 0) > 0 || ($h->{tokens_input} // 0) > 0, 'tokens counted')
        or diag(json_encode($h));

    my @req = $s->{anthropic}->requests;
    ok(@req >= 2, 'the model was asked (through the egress)');
    ok(!grep({ ($_->{headers}{'x-api-key'} // '') ne $s->{anthropic}->key } @req),
       '... each time with the real key (the run token swapped)');
    $run->{session} = $res->{sessionId};
    $s->{cc_session} = $res->{sessionId};
};

subtest "the session's next run continues the conversation" => sub {
    my $ses = $s->{cc_session} or return fail('no session');
    $s->{anthropic}->clear_requests;
    my $run = $s->run_task(task => 'SCENARIO-CCAGAIN: still there?', sessionId => $ses);
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed') or return $s->diag_run($run->{runId}, $r);
    is($s->run_hash($run->{runId})->{agent}, 'claude-code', "the session's agent");
    is($res->{result}, 'Still here.', 'its result');
    my @req = $s->{anthropic}->requests;
    my $body = json_encode($req[-1]{json} // $req[-1]{body} // '');
    like($body, qr/SCENARIO-CCWRITE/, "the model saw the first run's task")
        and like($body, qr/I wrote hello\.txt\./, '... and its answer');
};

subtest "claude-code: a repository's settings do not move its endpoint" => sub {
    my $run = $s->run_task(task => 'SCENARIO-CCWRITE: write hello.txt', agent => 'claude-code',
                           repository => 'https://github.com/acme/steer');
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed through the egress all the same')
        or $s->diag_run($run->{runId}, $r);
    is($res->{result}, 'I wrote hello.txt.', '... its result');
};

subtest 'claude-code: the spend cap' => sub {
    $s->{anthropic}->clear_requests;
    my $run = $s->run_task(task => 'SCENARIO-CCWRITE: write hello.txt', agent => 'claude-code',
                           maxCostUsd => 0.00001);
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'failed', 'a run past its maxCostUsd fails')
        or $s->diag_run($run->{runId}, $r);
    like($res->{error} // '', qr/budget|cost|spend/i, '... saying why') or diag($res->{error});
    is(scalar(my @x = $s->{anthropic}->requests), 1, '... after one model request');
};

subtest 'cancel' => sub {
    my $run = $s->run_task(task => 'SCENARIO-CCHANG: wait', agent => 'claude-code');
    wait_until(120, sub { ($s->run_hash($run->{runId})->{status} // '') eq 'running' })
        or return $s->diag_run($run->{runId}, $r);
    wait_until(60, sub { scalar $s->{anthropic}->requests });
    my $c = SMCP::Test::sc($s->call('opencode_cancel_run', { runId => $run->{runId} }));
    my $res = $s->wait_done($run->{runId}, 120);
    is($res->{status}, 'cancelled', 'cancelled') or $s->diag_run($run->{runId}, $r);
    ok(wait_until(60, sub { !$s->run_containers($run->{runId}) }), '... its sandbox gone');
};

subtest 'deadline' => sub {
    my $run = $s->run_task(task => 'SCENARIO-CCHANG: wait', agent => 'claude-code',
                           timeoutSeconds => 25);
    my $res = $s->wait_done($run->{runId}, 180);
    is($res->{status}, 'failed', 'failed at its deadline') or $s->diag_run($run->{runId}, $r);
    like($res->{error} // '', qr/timed out|deadline|timeout/i, '... saying so');
};

subtest 'tools/list: the agents offered' => sub {
    my ($sid) = $t->initialize;
    my $l = $t->rpc($sid, 'tools/list', {});
    my ($rt) = grep { $_->{name} eq 'opencode_run_task' } @{ $l->{json}{result}{tools} || [] };
    is_deeply($rt && $rt->{inputSchema}{properties}{agent}{enum},
              [ qw(opencode claude-code codex) ], "run_task's agent: the three");
};

subtest 'codex writes a file, its diff, its pull request' => sub {
    my $run = $s->run_task(task => 'SCENARIO-CXWRITE: write hello.txt', agent => 'codex',
                           repository => 'https://github.com/acme/app',
                           createPullRequest => JSON::PP::true);
    ok($run && $run->{runId}, 'queued') or return diag(json_encode($run));
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed') or return $s->diag_run($run->{runId}, $r);
    is($s->run_hash($run->{runId})->{model}, 'openai/gpt-5.5', "codex's own model");
    is($res->{result}, 'Codex wrote hello.txt.', "the result: the model's last text");
    my $diff = SMCP::Test::sc($s->call('opencode_get_diff', { runId => $run->{runId} }));
    like($diff->{diff} // '', qr{^\+\+\+ b/hello\.txt$}m, 'the diff: hello.txt')
        or diag(json_encode($diff));
    like($diff->{diff} // '', qr/^\+hello from codex$/m, '... with what the agent wrote');
    my ($p) = grep { $_->{head}{ref} eq "opencode/$run->{runId}" } $gh->pulls('acme/app');
    ok($p, 'a pull request of opencode/<runId>');
    is($res->{pullRequestUrl}, $p && $p->{html_url}, '... its pullRequestUrl');

    my @ev = map { $_->{json} || {} } $s->stored_events($run->{runId});
    my ($tool) = grep { ($_->{type} // '') eq 'tool_use' } @ev;
    my $part = $tool ? ($tool->{part} // {}) : {};
    is($part->{tool}, 'bash', "the timeline: Codex's command as OpenCode's bash")
        or diag(json_encode(\@ev));
    like($part->{state}{output} // '', qr/WROTE/, '... its output');
    my $h = $s->run_hash($run->{runId});
    ok(($h->{tokens_input} // 0) > 0, 'tokens counted') or diag(json_encode($h));

    my @req = $openai->requests(path => '/v1/responses');
    ok(@req >= 2, 'the model was asked (through the egress)');
    ok(!grep({ ($_->{headers}{authorization} // '') ne "Bearer $OPENAI_KEY" } @req),
       '... each time with the real key (the run token swapped)');
    $s->{cx_session} = $res->{sessionId};
};

subtest "codex: the session's next run continues the thread" => sub {
    my $ses = $s->{cx_session} or return fail('no session');
    $openai->clear_requests;
    my $run = $s->run_task(task => 'SCENARIO-CXAGAIN: still there?', sessionId => $ses);
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'completed', 'completed') or return $s->diag_run($run->{runId}, $r);
    is($res->{result}, 'Codex still here.', 'its result');
    my @req = $openai->requests(path => '/v1/responses');
    my $body = json_encode($req[-1]{json} // '');
    like($body, qr/SCENARIO-CXWRITE/, "the model saw the first run's task")
        and like($body, qr/Codex wrote hello\.txt\./, '... and its answer');
};

subtest 'codex: cancel, and the deadline' => sub {
    my $run = $s->run_task(task => 'SCENARIO-CXHANG: wait', agent => 'codex');
    wait_until(120, sub { scalar $openai->requests(path => '/v1/responses') })
        or return $s->diag_run($run->{runId}, $r);
    $s->call('opencode_cancel_run', { runId => $run->{runId} });
    my $res = $s->wait_done($run->{runId}, 120);
    is($res->{status}, 'cancelled', 'cancelled') or $s->diag_run($run->{runId}, $r);
    ok(wait_until(60, sub { !$s->run_containers($run->{runId}) }), '... its sandbox gone');

    $run = $s->run_task(task => 'SCENARIO-CXHANG: wait', agent => 'codex', timeoutSeconds => 25);
    $res = $s->wait_done($run->{runId}, 180);
    is($res->{status}, 'failed', 'failed at its deadline') or $s->diag_run($run->{runId}, $r);
    like($res->{error} // '', qr/timed out|deadline|timeout/i, '... saying so');
};

# Codex tells no cost: the egress meter holds its cap
subtest 'codex: the spend cap, metered at the egress' => sub {
    $openai->clear_requests;
    my $run = $s->run_task(task => 'SCENARIO-CXWRITE: write hello.txt', agent => 'codex',
                           maxCostUsd => 0.00001);
    my $res = $s->wait_done($run->{runId}, 300);
    is($res->{status}, 'failed', 'a run past its maxCostUsd fails')
        or $s->diag_run($run->{runId}, $r);
    like($res->{error} // '', qr/spend cap exceeded: .* metered at the egress/,
         '... the metered cost named') or diag($res->{error});
    is(scalar(my @x = $openai->requests(path => '/v1/responses')), 1,
       '... after one model request: the next was refused at the egress');
    cmp_ok($res->{meteredCostUsd} // 0, '>=', 0.00001, "get_result's meteredCostUsd")
        or diag(json_encode($res));
    is($res->{cost}, 0, '... where the agent reported none');
};

$openai->stop;
$s->done;
