#!/usr/bin/env perl
# A runner re-attaching to a run with a long event stream reads it in
# pages, not whole (t/runner.t has the setup's story: MCP through nginx,
# build/smcp-runner, dockerd, the sandbox image with the real OpenCode; the
# model is a fake):
#
#   the run prints 3000 lines, then its model hangs a while; the runner is
#   killed (SIGKILL) once they are stored, and started again with Redis's
#   MONITOR recording what it asks: every read of the run's events is a
#   bounded range (XRANGE/XREVRANGE ... COUNT n, n <= 1000), none the
#   whole stream; the run completes with each line stored once.
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack;
use SMCP::Test qw(json_encode wait_until);

my $LINES = 3000;
my $PRINT = qq{for i in \$(seq $LINES); do echo "line-\$i"; done > /proc/1/fd/1; echo printed};

my $s = SMCP::Stack->new(scripts => {
    'SCENARIO-LONG' => [
        { tool_use => { name => 'bash', input => { command => $PRINT,
                                                   description => 'Print' } } },
        { text => 'Long done.', hang => 12 },
    ],
});
my $t = $s->t;
my $runner = $s->start_runner(concurrency => 1);

my $run = $s->run_task(task => 'SCENARIO-LONG: print a lot', title => 'long');
my $id = $run->{runId};

sub lines_stored {
    return scalar grep { ($_->{type} // '') eq 'log' && ($_->{data} // '') =~ /^line-\d+$/ }
        $s->stored_events($id);
}

ok(wait_until(120, sub { lines_stored() >= $LINES }, 0.3), "the $LINES lines are stored")
    or diag($s->runner_log_tail($runner));
$s->stop_runner($runner, 'KILL');

# what the next runner asks Redis, from its first command on
my $mon_file = $t->dir . '/monitor.log';
my $mon = fork();
die "fork: $!" unless defined $mon;
if ($mon == 0) {
    open(STDOUT, '>', $mon_file) or POSIX::_exit(1);
    exec('redis-cli', '-p', $t->redis_port, 'MONITOR') or POSIX::_exit(127);
}
# redis-cli prints OK once MONITOR is on: from then on every command shows
ok(wait_until(30, sub { SMCP::Test::slurp($mon_file) =~ /^OK$/m }, 0.05), 'MONITOR is on')
    or diag(SMCP::Test::slurp($mon_file));

$runner = $s->start_runner(concurrency => 1);
my $r = $s->wait_done($id, 300);
kill 'TERM', $mon;
waitpid($mon, 0);

is($r->{status}, 'completed', 'the run completed after the re-attach')
    or diag($s->runner_log_tail($runner));
is($r->{result}, 'Long done.', '... with its answer');
like($s->runner_log($runner), qr/run=\Q$id\E.*re-attached/, 'the new runner re-attached');

my @reads = grep { /"X(?:REV)?RANGE" "smcp:run:\Q$id\E:events"/ }
            split /\n/, SMCP::Test::read_file(undef, $mon_file) // '';
ok(@reads > $LINES / 1000, scalar(@reads) . ' reads of the events in the re-attach')
    or diag(join "\n", @reads[0 .. ($#reads > 5 ? 5 : $#reads)]);
my @unbounded = grep { !/"COUNT" "(\d+)"/ || $1 > 1000 } @reads;
is(scalar(@unbounded), 0, 'each one a page (COUNT at most 1000), none the whole stream')
    or diag(join "\n", @unbounded[0 .. ($#unbounded > 5 ? 5 : $#unbounded)]);

my %seen;
my @dup = grep { $seen{$_}++ } map { $_->{data} }
          grep { ($_->{data} // '') =~ /^line-\d+$/ } $s->stored_events($id);
is(scalar(@dup), 0, 'each line stored once');
is(lines_stored(), $LINES, "all $LINES lines");

$s->stop_runner($runner, 'TERM');
$s->done;
