#!/usr/bin/env perl
# make up's state survives habits (issue 23, 4): the signing secret, the
# Redis data and the pid files live in a state directory outside build/
# (default: $XDG_STATE_HOME/sandbox-mcp, .ci/state), so that
#
#   make up, a run, make down, make clean, make up
#
# keeps the run, the token and the MCP session; `make clean` while the
# stack is up refuses (make down first) and removes nothing.  A stack
# started by an older checkout, its state in build/stack, is not lost:
# `make clean` refuses while build/stack holds it, `make up` refuses while
# that stack runs (`make down` stops it) and then moves the state to the
# state directory, the run and the token with it.
#
# make runs in a checkout of its own (SMCP::MakeUp checkout => 1: the
# sources by symlinks, build/ a copy), so that make clean removes only
# that build/; the egress side and the runner in front of a fake model,
# as in t/stack.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(:all);
use SMCP::Docker qw(docker_available);
use SMCP::MakeUp;

my $root = repo_root();
require_prereqs('build/smcp-token, smcp-runner and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -x "$root/build/smcp-runner" && -f module_path();
prereq_fail('no Docker engine: make up\'s runner needs one') unless docker_available();

my $up = SMCP::MakeUp->new(checkout => 1, state => 'default', text => 'state kept');
my ($top, $state) = ($up->top, $up->state);
my $xdg = $ENV{XDG_STATE_HOME};

sub up_ok {
    my ($what) = @_;
    my ($rc, $out) = $up->up;
    is($rc, 0, "$what: make up exits 0") or diag($out);
    my ($tok) = $out =~ m{^  Token:\s+(\S+)}m;
    return ($out, $tok // '');
}

sub down_ok {
    my ($what) = @_;
    my ($rc, $out) = $up->down;
    is($rc, 0, "$what: make down exits 0") or diag($out);
    return $out;
}

# ---------------------------------------------------------------------------
# the default state directory, a run in it

my ($out, $token) = up_ok('first');
my (undef, $dir) = run_cmd(['env', '-u', 'SMCP_STATE', "$top/.ci/state", 'dir']);
is($dir, "$xdg/sandbox-mcp\n", '.ci/state dir: $XDG_STATE_HOME/sandbox-mcp');
ok(-s "$state/secret", "the secret is in the state directory ($state)");
ok(-d "$state/redis", '... and the Redis data');
ok(!-e "$top/build/stack", 'nothing of the stack in build/');
like($out, qr{^  Logs:\s+\Q$state\E/logs/$}m, 'make up names the state directory (Logs:)');

my $sid = $up->initialize($token);
ok($sid, 'the printed token initializes a session');
my $rt = $up->call($token, $sid, 'opencode_run_task', { task => 'Say hello.' });
my $run = $rt->{runId} // 'none';
like($run, qr/^run_[0-9a-f]{24}$/, 'a run');
my $res = $up->wait_done($token, $sid, $run, 180);
is($res->{status}, 'completed', '... completes') or diag(explain($res), `tail -20 $state/logs/runner.log`);

# ---------------------------------------------------------------------------
# make clean while up: refused, nothing removed

{
    my ($rc, $o) = $up->make('clean');
    isnt($rc, 0, 'make clean while the stack is up is refused');
    like($o, qr/the stack is up \(its state in \Q$state\E\): make down first/,
         '... saying so: make down first') or diag($o);
    ok(-f "$top/build/ngx_http_sandbox_mcp_module.so", '... build/ is untouched');
}

# ---------------------------------------------------------------------------
# make down, make clean, make (all), make up: the run, the token and the
# MCP session are still there

down_ok('before make clean');
{
    my ($rc, $o) = $up->make('clean');
    is($rc, 0, 'make clean after make down') or diag($o);
    ok(!-e "$top/build", '... removed build/');
    ok(-s "$state/secret", '... not the secret');
}
$up->build;
up_ok('after make clean');
ok($up->initialize($token), 'the token of the first make up still works');
$res = $up->call($token, $sid, 'opencode_get_result', { runId => $run });
is($res->{status}, 'completed', 'get_result of the run before make clean, in the MCP session of then: completed');
is($res->{result}, 'state kept', '... with its result');

# ---------------------------------------------------------------------------
# an older checkout's make up: its state in build/stack

down_ok('before the older checkout');
ok(rename($state, "$top/build/stack"), 'the state put where an older checkout kept it (build/stack)');
{
    my ($rc, $o) = $up->make('clean');
    isnt($rc, 0, 'make clean with an older make up\'s state in build/stack is refused');
    like($o, qr{\Q$top\E/build/stack holds the state of an older checkout's make up .* make up moves it to \Q$state\E}s,
         '... saying make up moves it') or diag($o);
    ok(-s "$top/build/stack/secret", '... and it is untouched');
}
{
    # that checkout's stack running (its own SMCP_STATE then)
    local $ENV{SMCP_STATE} = "$top/build/stack";
    up_ok('the older checkout\'s stack');
}
{
    my ($rc, $o) = $up->up;
    isnt($rc, 0, 'make up while the older checkout\'s stack runs from build/stack is refused');
    like($o, qr/stop it with `make down` \(it finds it there\), then `make up` moves the state/,
         '... saying make down, then make up') or diag($o);
    ($rc, $o) = $up->make('clean');
    isnt($rc, 0, '... and so is make clean');
    like($o, qr/its stack is up: make down, then make up moves it/, '... saying so') or diag($o);
    $o = down_ok('the older checkout\'s stack');
    like($o, qr/stopping the stack of an older checkout \(its state in \Q$top\E\/build\/stack/,
         'make down stops the stack running from build/stack') or diag($o);
    like($o, qr/redis-server stopped/, '... all of it');
}
($out) = up_ok('with the older state');
like($out, qr{moved the state of an older checkout's make up from \Q$top\E/build/stack to \Q$state\E},
     'make up moves build/stack to the state directory, and says so') or diag($out);
ok(!-e "$top/build/stack", '... build/stack is gone');
ok($up->initialize($token), 'the first token still works');
$res = $up->call($token, $sid, 'opencode_get_result', { runId => $run });
is($res->{status}, 'completed', 'the first run is still there');
my @open = grep { ((stat $_)[2] & 0004) } split /\n/, `find $state -mindepth 1 2>/dev/null`;
is_deeply(\@open, [], 'nothing in the state directory is readable by others');

down_ok('at the end');
$up->stop_fakes;
done_testing();
