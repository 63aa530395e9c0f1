#!/usr/bin/env perl
# .ci/supervise, which keeps `make up`'s runner running the way
# docker-compose's restart policy keeps the runner container: a killed or
# failing child is restarted with backoff and every exit is logged with
# its status or signal; one exiting 2 (a configuration error) is not
# restarted; SIGTERM stops the child and the supervisor.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use POSIX qw(:sys_wait_h setsid);
use Test::More;
use Time::HiRes qw(time sleep);
use SMCP::Test qw(repo_root slurp wait_until);

my $sup = repo_root() . '/.ci/supervise';
my $dir = tempdir('smcp-supervise-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my @pids;

END { kill 'KILL', @pids if @pids }

# start(%env, cmd => [...]) -> (supervisor pid, child pid file, log file)
sub start {
    my (%o) = @_;
    my $n = @pids;
    my ($pidf, $log) = ("$dir/child-$n.pid", "$dir/sup-$n.log");
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        setsid();
        @ENV{keys %{ $o{env} || {} }} = values %{ $o{env} || {} };
        open(STDIN, '<', '/dev/null');
        open(STDOUT, '>>', $log) or POSIX::_exit(127);
        open(STDERR, '>&', \*STDOUT);
        exec($sup, $pidf, '--', @{ $o{cmd} }) or POSIX::_exit(127);
    }
    push @pids, $pid;
    return ($pid, $pidf, $log);
}

sub child_pid { my $p = slurp($_[0]); chomp $p; return $p =~ /^\d+$/ ? $p : 0 }
sub reaped { my ($pid) = @_; return waitpid($pid, WNOHANG) == $pid }

# whether a process ignores SIGTERM (its SigIgn mask in /proc)
sub ignores_term {
    my ($pid) = @_;
    my ($mask) = slurp("/proc/$pid/status") =~ /^SigIgn:\s*([0-9a-f]+)$/m or return 0;
    return (hex(substr($mask, -8)) >> (15 - 1)) & 1;
}

is(system("$sup x 2>/dev/null") >> 8, 2, 'usage: exit 2');

# a child that runs until killed
{
    my ($sup_pid, $pidf, $log) = start(cmd => ['sleep', '300']);
    my $c1;
    ok(wait_until(20, sub { $c1 = child_pid($pidf) }), 'the child runs; its pid in the pid file');
    ok(kill(0, $c1), '... alive');
    kill 'KILL', $c1;
    my $c2;
    ok(wait_until(20, sub { ($c2 = child_pid($pidf)) && $c2 != $c1 }), 'killed: it is restarted');
    ok(kill(0, $c2), '... the new child runs');
    like(slurp($log), qr/sleep \(pid $c1\) killed by signal 9 \(KILL\) after \d+ s; restarting in 1 s/,
         '... the crash is logged with the signal, and the restart');
    like(slurp($log), qr/sleep started \(pid $c2\)/, '... and the new start');

    my $t0 = time();
    kill 'TERM', $sup_pid;
    ok(wait_until(40, sub { reaped($sup_pid) }), 'SIGTERM: the supervisor exits');
    is($? >> 8, 0, '... with status 0');
    # the child stopped on the SIGTERM passed on, not by SIGKILL after the
    # grace period (30 s)
    ok(time() - $t0 < 20, sprintf('... promptly (%.2f s)', time() - $t0));
    ok(!kill(0, $c2), '... and the child is gone');
    like(slurp($log), qr/sleep \(pid $c2\) killed by signal 15 \(TERM\) after \d+ s; stopped/,
         '... the stop is logged');
    unlike(slurp($log), qr/did not stop/, '... no SIGKILL was needed');
    ok(!-e $pidf, '... the pid file removed');
}

# a child failing at once: backoff 1, 2, 4 s
{
    my ($sup_pid, $pidf, $log) = start(cmd => ['sh', '-c', 'exit 3']);
    ok(wait_until(30, sub { slurp($log) =~ /restarting in 4 s/ }), 'a failing child: restarted');
    my @d = slurp($log) =~ /exited with status 3 after \d+ s; restarting in (\d+) s/g;
    is_deeply([ @d[0 .. 2] ], [1, 2, 4], '... with backoff 1, 2, 4 s, its status logged');
    kill 'TERM', $sup_pid;
    ok(wait_until(20, sub { reaped($sup_pid) }), 'SIGTERM while waiting to restart: it exits');
}

# a child that exits 2 (the runner's bad configuration, e.g.
# SMCP_RUNNER_METRICS=nowhere): said so, never restarted
{
    my ($sup_pid, $pidf, $log) = start(cmd => ['sh', '-c', 'echo "bad option" >&2; exit 2']);
    ok(wait_until(10, sub { reaped($sup_pid) }), 'a child exiting 2: the supervisor exits');
    is($? >> 8, 2, '... with status 2');
    my $l = slurp($log);
    like($l, qr/sh \(pid \d+\) exited with status 2 after \d+ s: a configuration error .*; not restarting it/,
         '... saying the child\'s configuration is wrong') or diag($l);
    is(scalar(() = $l =~ /sh started/g), 1, '... the child started once, not restarted');
    like($l, qr/bad option/, '... the child\'s own words kept');
    ok(!-e $pidf, '... the pid file removed');
}

# a child that ignores SIGTERM: SIGKILL after the grace period
{
    my ($sup_pid, $pidf, $log) = start(env => { SMCP_SUPERVISE_GRACE => 1 },
                                       cmd => ['sh', '-c', 'trap "" TERM; while :; do sleep 0.1; done']);
    my $c;
    ok(wait_until(20, sub { $c = child_pid($pidf) }), 'a child that ignores SIGTERM runs');
    ok(wait_until(10, sub { ignores_term($c) }), '... its trap is set');
    kill 'TERM', $sup_pid;
    ok(wait_until(30, sub { reaped($sup_pid) }), 'the supervisor still exits');
    like(slurp($log), qr/did not stop in 1 s: SIGKILL/, '... after SIGKILL to the child');
    ok(!kill(0, $c), '... which is gone');
}

done_testing();
