#!/usr/bin/env perl
# An upgrade of every part of make up's stack in the middle of a run
# (issue 23, 6; docs/operations.md, "Upgrade"): while a run's sandbox
# prints tick-1, tick-2, ... and waits for the test, the module, the
# runner and smcp-token are new files (as `make all` writes them), the
# redis-server binary is replaced (as apt replaces it) and the sandbox
# image's tag moves to a new image (as build-image does when its inputs
# change); then `make up` again, the documented upgrade:
#
#   - both nginx instances re-execute themselves on the new module (a new
#     master each, the old one gone; nothing refused meanwhile), Redis
#     restarts on its data on the new binary, the runner is restarted
#     and re-attaches to the run, whose sandbox goes on on its old image
#   - the run completes, its events whole: exactly the script's agent
#     and lifecycle events, every tick once, in order, none missing
#   - the token and the MCP session of before work; a run started after
#     the upgrade gets a sandbox of the new image
#   - `make drain` (the other way to replace the runner: runs end on the
#     old one) during that run: it waits while the run goes on, /healthz
#     says the runner drains, it returns once the run completed, and the
#     next `make up` starts a runner that takes runs again
#
# make runs in a checkout of its own (SMCP::MakeUp checkout => 1);
# redis-server from a directory of this test's own put first in PATH; the
# sandbox image under a tag of this test's own.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(:all);
use POSIX qw(WNOHANG);
use SMCP::Docker qw(docker docker_available ensure_sandbox_image test_id open_gate run_sandbox
                    container_inspect_field fork_child);
use SMCP::MakeUp;
use SMCP::Stack qw(gate_step);

my $root = repo_root();
require_prereqs('build/smcp-token, smcp-runner and the module (run `make`)')
    unless -x "$root/build/smcp-token" && -x "$root/build/smcp-runner" && -f module_path();
prereq_fail('no Docker engine: make up\'s runner needs one') unless docker_available();
my $redis_bin = which_bin('redis-server') or prereq_fail('redis-server missing');

# redis-server as apt installs it: a file replaced by the upgrade
my $bindir = tempdir('smcp-upgrade-bin-XXXXXX', TMPDIR => 1, CLEANUP => 1);
sub install_redis {
    system('cp', '-L', $redis_bin, "$bindir/redis-server.new") == 0
        && rename("$bindir/redis-server.new", "$bindir/redis-server")
        or die "installing redis-server: $!";
}
install_redis();
$ENV{PATH} = "$bindir:$ENV{PATH}";

# the sandbox image under a tag of this test's own; the upgrade moves the
# tag to an image made from it (build-image keeps both: the label of its
# inputs' hash is the one it built)
my ($base_image) = ensure_sandbox_image();
my $image = 'smcp-sandbox:upgrade-' . lc(test_id() =~ s/[^A-Za-z0-9_.-]/-/gr);
my ($trc, undef, $terr) = docker('tag', $base_image, $image);
is($trc, 0, "the sandbox image tagged $image") or SMCP::Test::give_up($terr);
$ENV{SMCP_SANDBOX_IMAGE} = $image;
my $owner = $$;
# (after make down the tag goes, and the image made for the upgrade with it)
END { docker('rmi', '-f', $image) if $$ == $owner && $image }

my $up = SMCP::MakeUp->new(checkout => 1, scripts => {
    'SCENARIO-UPGRADE' => [ gate_step('upgrade-gate'), { text => 'Upgraded under me.' } ],
    'SCENARIO-AFTER' => [ gate_step('after-gate'), { text => 'After the upgrade.' } ],
});
my ($top, $state) = ($up->top, $up->state);
my $module = "$top/build/ngx_http_sandbox_mcp_module.so";

sub pidof_file { my $p = slurp("$state/$_[0].pid"); return ($p =~ /(\d+)/)[0] // 0 }
sub ticks {
    my ($id) = @_;
    return scalar grep { ($_->{type} // '') eq 'log' && ($_->{data} // '') =~ /^tick-\d+$/ }
        $up->t->run_events($id);
}
# the sandbox of a run, running (a pooled one it took too)
sub sandbox_of { return run_sandbox($_[0]) }
sub maps_module {
    my ($pid) = @_;
    my $maps = slurp("/proc/$pid/maps");
    return $maps =~ /\Q$module\E \(deleted\)$/m ? 'deleted'
         : $maps =~ /\Q$module\E$/m ? 'current' : 'none';
}

my ($rc, $out) = $up->up;
is($rc, 0, 'make up') or SMCP::Test::give_up($out);
my ($token) = $out =~ m{^  Token:\s+(\S+)}m;
my $sid = $up->initialize($token // '');
ok($sid, 'an MCP session');

my $rt = $up->call($token, $sid, 'opencode_run_task', { task => 'SCENARIO-UPGRADE: wait' });
my $id = $rt->{runId} // 'none';
ok(wait_until(180, sub { ticks($id) >= 3 }, 0.3), 'a run is running: its sandbox prints ticks')
    or diag(explain($up->call($token, $sid, 'opencode_get_result', { runId => $id })),
            `tail -20 $state/logs/runner.log`);

my %before = map { $_ => pidof_file($_) } qw(nginx egress redis runner);
my $sandbox = sandbox_of($id);
my $old_image = container_inspect_field($sandbox, '{{.Image}}') // '';
is(maps_module($before{nginx}), 'current', 'the MCP nginx runs the module of build/');
my $ticks_before = ticks($id);

# ---------------------------------------------------------------------------
# the upgrade: new files on disk, then make up

$up->build;
install_redis();
my ($brc, undef, $berr) = docker({ stdin => "FROM $image\nLABEL smcp.test-upgrade=" . test_id() . "\n" },
                                 'build', '-q', '-t', $image, '-');
is($brc, 0, 'a new sandbox image under the tag') or diag($berr);
my $new_image = container_inspect_field($image, '{{.Id}}') // '';
isnt($new_image, $old_image, '... another image');
is(maps_module($before{nginx}), 'deleted', 'the running nginx maps a module replaced on disk');

($rc, $out) = $up->up;
is($rc, 0, 'make up again: the upgrade') or diag($out);
like($out, qr/^nginx \(nginx\) upgraded in place: master $before{nginx} handed over to \d+/m,
     '... the MCP nginx re-executed itself on the new files') or diag($out);
like($out, qr/^nginx \(egress\) upgraded in place: master $before{egress} handed over to \d+/m,
     '... and the egress nginx');
like($out, qr/^redis-server \(pid $before{redis}\) stopped: its binary was replaced/m,
     '... Redis restarted on its new binary');

my %after = map { $_ => pidof_file($_) } qw(nginx egress redis runner);
for my $p (qw(nginx egress)) {
    isnt($after{$p}, $before{$p}, "$p: a new master");
    is(maps_module($after{$p}), 'current', "... on the new module");
    ok(wait_until(30, sub { !kill(0, $before{$p}) }, 0.2), '... the old master gone');
}
isnt($after{redis}, $before{redis}, 'redis: a new process');
unlike(readlink("/proc/$after{redis}/exe") // '', qr/\(deleted\)/, '... of the binary on disk');
isnt($after{runner}, $before{runner}, 'runner: a new process');
ok(wait_until(60, sub { slurp("$state/logs/runner.log") =~ /run=\Q$id\E.*re-attached/ }, 0.3),
   '... which re-attached to the run') or diag(`tail -20 $state/logs/runner.log`);
is(sandbox_of($id), $sandbox, 'the run\'s sandbox went on (the same container)');
is(container_inspect_field($sandbox, '{{.Image}}'), $old_image, '... on its image');
ok(wait_until(60, sub { ticks($id) > $ticks_before + 3 }, 0.3),
   'its ticks are stored again') or diag(ticks($id) . " ticks, $ticks_before before");

ok(open_gate($id, 'upgrade-gate'), 'the run goes on (its gate opened)');
my $res = $up->wait_done($token, $sid, $id, 180);
is($res->{status}, 'completed', 'the run completes after the upgrade of every part')
    or diag(explain($res), `tail -30 $state/logs/runner.log`);
is($res->{result}, 'Upgraded under me.', '... with its answer (a model call after the upgrade)');
SMCP::Events::check_events_exact([$up->t->run_events($id)], $up->t->run_hash($id),
    'the run upgraded under', agent => \@SMCP::Stack::GATE_AGENT,
    lifecycle => \@SMCP::Stack::FOUR_STEPS_LIFECYCLE, ticks => 1);

# the token and the session of before; a new run on the new image
my $after = $up->call($token, $sid, 'opencode_run_task', { task => 'SCENARIO-AFTER: wait' });
my $aid = $after->{runId} // 'none';
like($aid, qr/^run_[0-9a-f]{24}$/, 'the token and the MCP session of before start a run');
ok(wait_until(300, sub { ticks($aid) >= 1 }, 0.3), '... which runs') or do {
    my $h = $up->t->run_hash($aid);
    diag('run ' . json_encode({ map { ($_ => $h->{$_}) } grep { $_ ne 'task' } keys %$h }));
    diag('events: ' . join(' ', map { ($_->{type} // '?') . '=' . substr($_->{data} // '', 0, 160) }
                                    $up->t->run_events($aid)));
    diag(`tail -40 $state/logs/runner.log`);
    diag(`docker ps -a --format '{{.Names}} {{.Status}} {{.Image}}' 2>&1 | head -20`);
};
is(container_inspect_field(sandbox_of($aid), '{{.Image}}'), $new_image,
   '... in a sandbox of the new image');

# make drain while it runs
my $drain_out = tempdir('smcp-upgrade-out-XXXXXX', TMPDIR => 1, CLEANUP => 1) . '/drain.out';
my $drain = fork_child(sub {
    open(STDOUT, '>', $drain_out) or POSIX::_exit(1);
    open(STDERR, '>&', \*STDOUT);
    exec('make', '-s', '-C', $top, 'drain') or POSIX::_exit(127);
}, 'make drain');
ok(wait_until(30, sub { slurp($drain_out) =~ /draining: no new run is taken/ }, 0.2),
   'make drain: the runner drains') or diag(slurp($drain_out));
my $hz = {};
ok(wait_until(15, sub {
    $hz = json_decode($up->t->http(method => 'GET', path => '/healthz')->{body} // '') // {};
    ($hz->{runners} // '') eq 'draining' }, 0.3), '... /healthz says so') or diag(explain($hz));
ok(kill(0, $drain), '... make drain waits while the run goes on');
ok(open_gate($aid, 'after-gate'), '... its gate opened');
$res = $up->wait_done($token, $sid, $aid, 180);
is($res->{status}, 'completed', '... and it completes on the draining runner') or diag(explain($res));
ok(wait_until(30, sub { waitpid($drain, WNOHANG) == $drain }, 0.2), 'make drain returns then');
is($? >> 8, 0, '... exit 0');
like(slurp($drain_out), qr/drained: no run left; make up starts a new runner/, '... saying so')
    or diag(slurp($drain_out));
($rc, $out) = $up->up;
is($rc, 0, 'make up after the drain: a new runner') or diag($out);
ok(wait_until(30, sub {
    $hz = json_decode($up->t->http(method => 'GET', path => '/healthz')->{body} // '') // {};
    ($hz->{runners} // '') eq 'ok' }, 0.3), '... which takes runs (/healthz: ok)') or diag(explain($hz));

my $log = slurp("$state/logs/error.log") . slurp("$state/logs/egress-error.log");
unlike($log, qr/\[(alert|crit|emerg)\]/, 'no alert/crit/emerg in the nginx error logs');

($rc, $out) = $up->down;
is($rc, 0, 'make down') or diag($out);
ok(wait_until(30, sub { !kill(0, $after{$_}) }, 0.2), "$_ stopped") for qw(nginx egress redis);
$up->stop_fakes;
done_testing();
