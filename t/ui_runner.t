#!/usr/bin/env perl
# The run page of a real run: the runner starts a sandbox with the real
# OpenCode (the model a scripted fake, GitHub a fake), and headless
# Chromium opens the run's watchUrl at once and watches it to the end:
# the tool calls OpenCode prints (write, then bash with its command and
# folded output) appear while the run is running, the file it wrote among
# the files changed so far (read from OpenCode's own events), the status
# turns completed without reload, the reply, result, tokens and diff render,
# a message typed in the page's box while it runs (markup in it) shows as
# text in the timeline, is taken by the sandbox and reaches the model,
# 390 px does not scroll sideways, nothing leaves the origin.  Screenshots
# go to build/ui-screenshots/real-run-*.png.
#
# Needs root, Docker, `make` (module, runner), redis-server, Chromium and
# playwright-core (`make deps`); the sandbox image is built on first use.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;

use SMCP::Stack;
use SMCP::Test qw(wait_until repo_root json_encode require_prereqs js_checks
                  chromium_bin browser_missing);

my @EXPECTED = (
    'the watchUrl opens the run page while the run has not ended',
    'the file the real OpenCode wrote shows among the files changed so far while it runs',
    'a message from the page reaches the running agent: shown as text, then taken',
    'the real OpenCode\'s tool calls appear live: write, then bash with its command',
    'the command\'s output is folded and holds what it printed',
    'the status turns completed, without reload',
    'the reply, the result, tokens and cost and the diff render',
    '390 px: the real run\'s page does not scroll sideways',
    'no request left the origin',
);

my $root = repo_root();
my $chromium = chromium_bin();
require_prereqs(browser_missing());

my $reply = 'greet.js greets by name; test.sh prints ok.';
my $command = 'sleep 4; sh test.sh';
my $mark = 'STEER-UI-' . int(rand(1e9));
my $steer = "<img src=x onerror=alert(1)> $mark: also say hello";
my $s = SMCP::Stack->new(
    scripts => {
        'SCENARIO-UI' => [
            { tool_use => { name => 'write', input => {
                filePath => '/workspace/repo/greet.js',
                content => "module.exports = (name) => 'Hello, ' + name + '!';\n" } } },
            # the page must see the run running: the model takes its time
            { tool_use => { name => 'bash', input => {
                command => $command, description => 'Run the tests' } }, hang => 2 },
            { text => $reply, hang => 3 },
        ],
    },
    repos => { 'owner/app' => {
        'README.md' => "# app\n",
        'test.sh'   => "#!/bin/sh\ntest -f greet.js && echo 'ok 1 - greets by name'\n",
    } },
    server => q{
        location /ui/ {
            sandbox_mcp_ui;
        }},
);
my $t = $s->t;
# the warm pool: a pooled sandbox's OpenCode server takes messages
my $runner = $s->start_runner(concurrency => 1, args => ['--pool', 1]);
ok($s->wait_pool_warm($runner), 'the pooled sandbox is warm');

my $run = $s->run_task(task => 'SCENARIO-UI: add greet.js and run the tests',
                       repository => 'https://github.com/owner/app',
                       title => 'Greet by name');
my $id = $run->{runId};

my $cfg_file = $t->dir . '/ui_runner.json';
open(my $fh, '>', $cfg_file) or die "$cfg_file: $!";
print $fh json_encode({
    origin => 'http://127.0.0.1:' . $t->port, chromium => $chromium,
    watchUrl => $run->{watchUrl}, shots => "$root/build/ui-screenshots",
    tenantUrl => 'http://127.0.0.1:' . $t->port . '/ui/?token='
                 . $t->token(scope => 'ui', repos => undef),
    file => 'greet.js', added => "module.exports = (name) =>",
    command => $command, printed => 'ok 1 - greets by name', reply => $reply,
    steer => $steer, steerMark => $mark,
});
close $fh;

js_checks('browser', ["$root/t/js/ui_runner.mjs", $cfg_file], \@EXPECTED,
          timeout => 300);

my $r = $s->result($id);
is($r->{status}, 'completed', 'the run completed') or $s->diag_run($id, $runner);
is($r->{result}, $reply, 'its result is the reply the page showed');
my @with = grep { ($_->{body} // '') =~ /\Q$mark\E/ }
           $s->anthropic->requests(path => qr{/messages$});
ok(@with >= 1, 'the page\'s message reached the model');
my ($sent) = grep { ($_->{type} // '') eq 'message' && !$_->{json}{delivered} }
             $s->stored_events($id);
is($sent && $sent->{json}{via}, 'dashboard', '... sent via the dashboard');
is($sent && $sent->{json}{text}, $steer, '... its text as typed');

$s->done;
