#!/usr/bin/perl

# Claude Code (the real one, from npm) driving a real stack through the
# configuration of docs/clients.md: the doc's `claude mcp add` line, then
# `claude -p` sessions whose model is a fake Anthropic API
# (SMCP::Fakes::mcp_client_script) that calls the server's tools as a
# model would, against nginx + the module + Redis + the runner + a
# sandbox running the real OpenCode (whose own model is the stack's
# scripted fake):
#
#   1. tools deferred (Claude Code's default: the MCP tools named in the
#      system prompt, loaded through ToolSearch): opencode_run_task on a
#      repository, opencode_get_result until the run has ended,
#      opencode_get_diff; Claude Code's answer is the model's summary of
#      what the tools returned.
#   2. tools listed (ENABLE_TOOL_SEARCH=false): opencode_get_result and
#      opencode_get_diff on that run, called at once.
#
# Needs Docker, the sandbox image, nginx + the module, redis-server and
# the clients from `npm ci`; CI=true turns skips into failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time);
use SMCP::Test qw(json_decode json_encode);
use SMCP::Clients qw(snippet claude_name);
use SMCP::Fakes qw(mcp_client_script);
use SMCP::Stack;

my $T0 = time();
my $c = SMCP::Clients->new;

my $REPLY = 'Added hello.txt.';
my $s = SMCP::Stack->new(
    scripts => { 'SCENARIO-CC' => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/hello.txt', content => "hello from Claude Code\n" } } },
        { text => $REPLY },
    ] },
    repos => { 'acme/app' => { 'README.md' => "# app\n" } },
);
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 1);
my $base = 'http://127.0.0.1:' . $t->port;
my $name = claude_name();        # the doc's: Claude Code's tools are mcp__NAME__TOOL

sub terminal { return ($_[0] // '') =~ /^(completed|failed|cancelled)$/ ? 1 : 0 }

# the model behind Claude Code: a new run, or (prompt "Check on run ID")
# an existing one; get_result until it has ended, its diff, a summary
my $plan = sub {
    my ($calls, $j) = @_;
    my ($asked) = json_encode($j->{messages}[0] // {}) =~ /Check on run ([A-Za-z0-9_-]+)/;
    my ($run) = grep { $_->{tool} eq 'opencode_run_task' } @$calls;
    my $id = $asked // ($run && $run->{json} ? $run->{json}{runId} : undef);
    if (!@$calls && !$asked) {
        return { tool => 'opencode_run_task', input => {
            task => 'SCENARIO-CC: add hello.txt', title => 'From Claude Code',
            repository => 'https://github.com/acme/app' } };
    }
    return { text => 'no runId: ' . ($run ? $run->{text} : '') } unless $id;
    my $last = $calls->[-1];
    if (!$last || $last->{tool} eq 'opencode_run_task'
        || ($last->{tool} eq 'opencode_get_result' && !terminal($last->{json}{status})))
    {
        return { tool => 'opencode_get_result', input => { runId => $id, waitSeconds => 20 } };
    }
    if ($last->{tool} eq 'opencode_get_result') {
        return { tool => 'opencode_get_diff', input => { runId => $id } };
    }
    # the last get_result's status: the run's end (the first may say running)
    my ($status) = reverse map { $_->{json}{status} }
                   grep { $_->{tool} eq 'opencode_get_result' } @$calls;
    my ($added) = ($last->{json}{diff} // '') =~ /^\+(hello.*)$/m;
    return { text => "Run $id " . ($status // '?') . ': ' . ($added // 'no diff') };
};
my $model = SMCP::Fakes::start_anthropic(key => undef,
    script => [ mcp_client_script(server => $name, plan => $plan) ]);

my %claude_env = (ANTHROPIC_BASE_URL => $model->url, ANTHROPIC_API_KEY => 'sk-ant-fake-client');

# claude -p PROMPT: (exit code, the JSON result, stderr)
sub claude_p {
    my ($prompt, %env) = @_;
    my ($rc, $out, $err) = $c->run(['claude', '-p', $prompt, '--allowedTools', "mcp__$name",
                                    '--output-format', 'json'],
                                   env => { %claude_env, %env }, timeout => 480);
    return ($rc, json_decode($out) // { raw => $out }, $err);
}

# the tool calls of the conversation whose prompt holds $mark, in order
sub tool_calls {
    my ($mark) = @_;
    my ($last) = reverse grep { ($_->{body} // '') =~ /\Q$mark\E/ } $model->requests;
    return () unless $last && $last->{json};
    return map { $_->{name} } grep { ($_->{type} // '') eq 'tool_use' }
           map { ref $_->{content} eq 'ARRAY' ? @{ $_->{content} } : () }
           @{ $last->{json}{messages} || [] };
}

my ($rc, $out, $err) = $c->sh(snippet('claude-code-add'), url => $base,
                              env => { PROXY_JWT_SECRET => $t->secret });
is($rc, 0, 'the doc\'s claude mcp add line') or diag("$out$err");
($rc, $out, $err) = $c->run(['claude', 'mcp', 'list'], timeout => 60);
like($out, qr/^\Q$name\E: \Q$base\E\/mcp \(HTTP\) - \S+ Connected$/m, 'claude mcp list: connected')
    or diag("$out$err");

my $id;
subtest 'claude -p, tools deferred: run_task, get_result, get_diff' => sub {
    my $t0 = time();
    my ($rc, $res, $err) = claude_p('Add hello.txt to acme/app with the opencode tools.');
    $s->timing('claude -p: run_task to get_diff', time() - $t0);
    is($rc, 0, 'claude -p exits 0') or diag($err);
    ok(!$res->{is_error}, 'no error') or diag(json_encode($res));
    ($id) = ($res->{result} // '') =~ /^Run (\S+) /;
    is($res->{result}, "Run $id completed: hello from Claude Code",
       'the answer: the run completed, its diff adds hello.txt') or diag(json_encode($res));

    my @calls = tool_calls('Add hello.txt to acme/app');
    my @mcp = map { /^mcp__\Q$name\E__(.+)$/ ? $1 : () } @calls;
    ok(@mcp >= 3 && $mcp[0] eq 'opencode_run_task' && $mcp[-1] eq 'opencode_get_diff'
       && !grep({ $_ ne 'opencode_get_result' } @mcp[1 .. $#mcp - 1]),
       'the calls: run_task, get_result until the end, get_diff') or diag("@calls");
    is(scalar(grep { $_ eq 'ToolSearch' } @calls), 3,
       'each of the three tools loaded through ToolSearch first (deferred)') or diag("@calls");

    SKIP: {
        skip 'no run id', 3 unless $id;
        # the run is the doc's tenant's, not the test session's: Redis
        my $r = $s->run_hash($id);
        is($r->{status}, 'completed', 'the run: completed') or $s->diag_run($id, $runner);
        is($r->{result}, $REPLY, '... with the sandbox agent\'s reply');
        is($r->{tenant}, $ENV{USER} || 'local',
           '... for the tenant of the doc\'s token (make up\'s)');
    }
};

subtest 'claude -p, tools listed: get_result, get_diff' => sub {
    plan skip_all => 'no run' unless $id;
    my ($rc, $res, $err) = claude_p("Check on run $id.", ENABLE_TOOL_SEARCH => 'false');
    is($rc, 0, 'claude -p exits 0') or diag($err);
    is($res->{result}, "Run $id completed: hello from Claude Code", 'the answer')
        or diag(json_encode($res));
    my @calls = tool_calls("Check on run $id");
    is_deeply(\@calls, [ map { "mcp__${name}__$_" } qw(opencode_get_result opencode_get_diff) ],
              'called at once: the tools came in the request') or diag("@calls");
};

$model->stop;
$s->done;
