#!/usr/bin/env perl
# MCP tasks end to end (issue 12): the official SDK client's experimental
# tasks API (client.experimental.tasks.callToolStream) on
# opencode_run_task against a real run — the runner starts a sandbox with
# the real OpenCode, the model a scripted fake, GitHub a fake: the task is
# created at once, polled working to completed, and its result is the
# run's final answer with the related-task _meta; a second task, cancelled
# with tasks/cancel while its sandbox runs, ends cancelled and its sandbox
# is stopped (the run cancelled in Redis, its container gone).  Progress:
# opencode_get_result waiting with the SDK's onprogress gets a
# notifications/progress per agent step (the first while the run still
# works) and the run's lifecycle lines as log messages, then the result;
# the run's resource, subscribed with subscribeResource, is updated on the
# session's GET stream (the SDK's own) as it runs and completes.  A client
# that set a logging level and asked for no progress (callToolStream
# without onprogress) hears the run's lifecycle as log messages on the
# task's result stream, and on the session's GET stream the status
# changes of the run it started (issue 25, point 5).
#
# Needs root, Docker, `make` (module, runner), redis-server and node; the
# sandbox image is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use SMCP::Stack;
use SMCP::Test qw(repo_root json_encode json_decode require_prereqs
                  js_checks node_bin wait_until);

my @EXPECTED = (
    'the server declares tasks and opencode_run_task supports them',
    'callToolStream: taskCreated at once, a working task',
    'taskStatus messages: working, then completed',
    'the result is the run\'s final answer, with the related task',
    'tasks/get and tasks/list see the task',
    'callToolStream without onprogress, a logging level set: the run\'s lifecycle as log messages',
    'the GET stream: the status changes of a run the session started, as log messages',
    'get_result waiting with onprogress: a notifications/progress per agent step while the run runs, then the result',
    'the subscribed run\'s updates arrive on the GET stream: running, completed',
    'callToolStream of a long run, cancelled while it runs: the stream ends "cancelled"',
    'tasks/result of the cancelled task: the run, cancelled, isError',
);

my $root = repo_root();
require_prereqs(node_bin() ? () : ('node'));

my $reply = 'hello.txt written.';
my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-TASK' => [
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/hello.txt', content => "hello\n" } } },
            { text => $reply, hang => 2 },
        ],
        'SCENARIO-PROG' => [
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/p.txt', content => "p\n" } } },
            { tool_use => { name => 'bash', input => {
                command => 'cat p.txt', description => 'Show it' } } },
            { text => 'p.txt shown.', hang => 3 },
        ],
        # the model takes its time: the task is cancelled meanwhile
        'SCENARIO-SLOW' => [
            { text => 'never seen', hang => 90 },
        ],
    },
    repos => { 'owner/app' => { 'README.md' => "# app\n" } },
);
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 2);

my $cfg_file = $t->dir . '/sdk_tasks.json';
open(my $fh, '>', $cfg_file) or die "$cfg_file: $!";
print $fh json_encode({
    url => 'http://127.0.0.1:' . $t->port . '/mcp', token => $t->token(scope => 'mcp'),
    repository => 'https://github.com/owner/app',
    task => 'SCENARIO-TASK: write hello.txt', reply => $reply,
    hangTask => 'SCENARIO-SLOW: think for long',
    progressTask => 'SCENARIO-PROG: write p.txt and show it', progressCommand => 'cat p.txt',
});
close $fh;

my $got = js_checks('sdk', ["$root/t/js/sdk_tasks.mjs", $cfg_file], \@EXPECTED,
                    timeout => 300);

# the runs the client made: their sessions' volumes go with the stack
my @runs = @{ $t->redis('ZRANGE', 'smcp:runs:alice', 0, -1) || [] };
for my $run (@runs) {
    my $ses = $t->redis('HGET', "smcp:run:$run", 'session');
    $s->{sessions}{$ses} = 1 if $ses;
}
is(scalar @runs, 4, 'four runs: one per task (three), one with progress');

my ($slow) = grep { ($t->redis('HGET', "smcp:run:$_", 'task') // '') =~ /SLOW/ } @runs;
ok($slow, 'the cancelled task\'s run');
if ($slow) {
    ok(wait_until(60, sub { ($t->redis('HGET', "smcp:run:$slow", 'status') // '') eq 'cancelled' }),
       'the run is cancelled') or $s->diag_run($slow, $runner);
    is($t->redis('HGET', "smcp:run:$slow", 'cancel_requested'), '1',
       'through cancel_requested, while it ran');
    ok(wait_until(60, sub { !$s->run_containers($slow) }), 'its sandbox is gone');
}

$s->done;
