#!/usr/bin/env perl
# A hostile agent against the runner, for real (t/runner.t has the setup's
# story): MCP through nginx, build/smcp-runner, dockerd, the sandbox image
# with the real OpenCode; only the model (and GitHub) are fakes.  The
# scripted model has OpenCode's bash tool write straight into the
# container's log (/proc/1/fd/1, what the runner follows):
#
#   1. a 70 MB line, then a line with NUL bytes: the runner stays up, the
#      run completes, the huge line is stored cut to --max-line with a
#      "line truncated" warning, the NUL line is stored byte for byte
#   2. an endless line streaming while the run's deadline passes: the run
#      still fails at its deadline (the follower never sees a line end)
#   3. the same while the run is cancelled: cancelled, within seconds (not
#      at the model's 150 s hang)
#   4. forged step_finish lines (negative, absurd tokens and costs): the
#      run's tokens and cost count only OpenCode's own steps
#   5. 3 MB of output against --max-event-bytes 1m: one "output budget
#      exceeded" warning, nothing stored after it, event_bytes within the
#      budget; the result, tokens and diff still come from every line
#   6. a run whose runner is killed (SIGKILL) on every take: failed on the
#      4th take ("crashed its runner 3 times"), its sandbox removed
#
# Needs root, Docker, `make` and redis-server; CI=true turns skips into
# failures.  Uses $SMCP_SANDBOX_IMAGE (the entry script prints the diff
# line within SMCP_DIFF_MAX).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(time sleep);

use SMCP::Stack qw(bash_step);
use SMCP::Test qw(json_decode wait_until);

# long enough for the endless line to begin first on a loaded machine (an
# OpenCode start took 40-80 s of a 2-core machine under make test; a CI
# run saw none of it within 120 s, its OpenCode server still starting),
# and short of the model's hang that follows it ($HANG)
my $DEADLINE = 200;
my $HANG = 260;

# bash commands the "agent" runs in the sandbox
my @FORGED = (
    '{"type":"step_finish","part":{"tokens":{"input":-1000000,"output":5},"cost":-100}}',
    '{"type":"step_finish","part":{"tokens":{"input":1,"output":1},"cost":1e300}}',
    '{"type":"step_finish","part":{"tokens":{"input":99999999999999,"output":1},"cost":0.01}}',
);
my $FORGED = "printf '%s\\n' " . join(' ', map { "'$_'" } @FORGED) . ' > /proc/1/fd/1; ';
my $HUGE = $FORGED . 'head -c 70000000 /dev/zero | tr "\0" A > /proc/1/fd/1; '
         . 'echo > /proc/1/fd/1; printf "A\0B\n" > /proc/1/fd/1; echo written';
# 3000 lines of 1000 digits
my $FLOOD = q{for i in $(seq 3000); do printf '%01000d\n' $i; done > /proc/1/fd/1; echo flooded};
# a marker line, then an endless line at 1 MB/s (the tool call never ends;
# past --max-line within a second, and cheap enough to share the machine)
my $ENDLESS = 'echo endless-start > /proc/1/fd/1; while :; do head -c 100000 /dev/zero '
            . '| tr "\0" B; sleep 0.1; done > /proc/1/fd/1';

my $s = SMCP::Stack->new(scripts => {
    'SCENARIO-HUGE'     => [ bash_step($HUGE, 'Write to the log'), { text => 'Huge done.' } ],
    'SCENARIO-DEADLINE' => [ bash_step($ENDLESS, 'Write to the log'), { hang => $HANG } ],
    'SCENARIO-CANCEL'   => [ bash_step($ENDLESS, 'Write to the log'), { hang => 150 } ],
    'SCENARIO-BUDGET'   => [
        { tool_use => { name => 'write', input => {
            filePath => '/workspace/repo/budget.txt', content => "kept\n" } } },
        bash_step($FLOOD, 'Write to the log'),
        { text => 'Budget done.' },
    ],
    'SCENARIO-LOOP'     => [ { hang => 150 } ],
});
my $t = $s->t;
my $BUDGET = 1024 * 1024;
my $runner = $s->start_runner(concurrency => 4, args => ['--max-event-bytes', '1m']);

sub endless_started {
    my ($id) = @_;
    return scalar grep { ($_->{data} // '') eq 'endless-start' } $s->stored_events($id);
}

##############################################################################

my $t0 = time();
my $huge = $s->run_task(task => 'SCENARIO-HUGE: write a 70 MB line', title => 'huge');
my $dl = $s->run_task(task => 'SCENARIO-DEADLINE: an endless line', title => 'deadline',
                      timeoutSeconds => $DEADLINE);
my $cancel = $s->run_task(task => 'SCENARIO-CANCEL: an endless line', title => 'cancel');
my $budget = $s->run_task(task => 'SCENARIO-BUDGET: 3 MB of output', title => 'budget');

subtest 'a 70 MB line and a line with NUL bytes' => sub {
    my $id = $huge->{runId};
    my $r = $s->wait_done($id, 300);
    $s->timing('70 MB line: run_task -> done', time() - $t0);
    is($r->{status}, 'completed', 'the run completed') or $s->diag_run($id, $runner);
    is($r->{result}, 'Huge done.', 'with the agent\'s answer');
    ok($s->runner_alive($runner), 'the runner is up');

    my @ev = $s->stored_events($id);
    my @big = grep { $_->{type} eq 'log' && ($_->{data} // '') =~ /^A{1000}/ } @ev;
    is(scalar(@big), 1, 'the huge line is stored once') or diag($s->show_events($id));
    is(length($big[0]{data} // ''), 256 * 1024, '... cut to --max-line (256 KiB)')
        if @big;
    ok(defined($big[0]{dts}), '... with its Docker timestamp') if @big;
    my ($at) = grep { $ev[$_]{id} eq ($big[0] && $big[0]{id} // '') } 0 .. $#ev;
    my $warn = defined $at ? $ev[$at + 1] : undef;
    is($warn && $warn->{type}, 'lifecycle', 'a lifecycle event follows it');
    # bytes: what came for the line; Docker's follower may send some of it
    # twice around a json-file rotation (the log passes 50 MB)
    my $w = $warn && $warn->{json} || {};
    is($w->{warning}, 'line truncated', '... {"warning":"line truncated",...}')
        or diag($warn && $warn->{data});
    is($w->{kept}, 262144, '... "kept":262144');
    ok(($w->{bytes} // 0) >= 70000000,
       "... \"bytes\":$w->{bytes} (the line's 70000000, give or take Docker's repeats)");
    ok($warn && !defined $warn->{dts}, '... without a dts (re-attach counts log lines only)');

    my @nul = grep { ($_->{data} // '') =~ /^A\0/ } @ev;
    is(scalar(@nul), 1, 'the NUL line is stored');
    is($nul[0] && $nul[0]{data}, "A\0B", '... byte for byte: "A\0B" (3 bytes)')
        or diag('stored: ' . unpack('H*', $nul[0] ? $nul[0]{data} : ''));
    is($nul[0] && $nul[0]{type}, 'log', '... as a log line');

    my @tools = grep { ($_->{json}{type} // '') eq 'tool_use' } @ev;
    like($tools[0] && $tools[0]{json}{part}{state}{output} // '', qr/written/,
         'the bash tool finished');
    my @got = $s->events($id);
    ok(@got >= @ev - 1, 'opencode_get_events still answers for the run ('
                        . scalar(@got) . ' events)');
};

subtest "an endless line while the deadline ($DEADLINE s) passes" => sub {
    my $id = $dl->{runId};
    my $r = $s->wait_done($id, $DEADLINE + 180);
    my $h = $s->run_hash($id);
    my $ran = (($h->{finished_at} // 0) - ($h->{created_at} // 0)) / 1000;
    $s->timing("endless line: run_task -> $r->{status}", $ran);
    is($r->{status}, 'failed', 'failed') or $s->diag_run($id, $runner);
    like($r->{error} // '', qr/deadline/i, 'at its deadline: ' . ($r->{error} // 'null'));
    # the deadline the runner stored (ms) when the run started: ended after
    # it, and soon (the endless line and the model's 150 s hang would not)
    my $past = (($h->{finished_at} // 0) - ($h->{deadline} // 0)) / 1000;
    ok($h->{deadline} && $past >= 0 && $past < 30,
       sprintf('ended %.1f s after its deadline (%.1f s after run_task, deadline %d s)',
               $past, $ran, $DEADLINE))
        or $s->diag_run($id, $runner);
    ok(endless_started($id), 'the line before the endless one is stored')
        or diag($s->show_events($id));
    ok(wait_until(20, sub { !$s->run_containers($id) }), 'the container is removed')
        or diag('still there: ' . join(' ', $s->run_containers($id)));
    like($s->runner_log($runner), qr/run=\Q$id\E.*deadline reached/, 'runner log: deadline reached')
        or diag(join "\n", grep { /\Q$id\E/ } split /\n/, $s->runner_log($runner));
};

subtest 'an endless line while the run is cancelled' => sub {
    my $id = $cancel->{runId};
    ok(wait_until(90, sub { endless_started($id) }, 0.3), 'the line is streaming')
        or $s->diag_run($id, $runner);
    sleep(3);           # the endless line goes on a while (3 MB): the cancel comes inside it
    my $tc = time();
    $s->call('opencode_cancel_run', { runId => $id });
    my $r = $s->wait_done($id, 300);
    my $dt = time() - $tc;
    $s->timing('endless line: cancel -> cancelled', $dt);
    is($r->{status}, 'cancelled', sprintf('cancelled, %.1f s after the cancel', $dt))
        or $s->diag_run($id, $runner);
    # not left to the endless line or the model's 150 s hang
    ok($dt < 30, 'within seconds');
    ok(wait_until(20, sub { !$s->run_containers($id) }), 'the container is removed');
};

subtest 'forged step_finish lines' => sub {
    my $id = $huge->{runId};
    my @ev = $s->stored_events($id);
    my @forged = grep { ($_->{json}{type} // '') eq 'step_finish' && !$_->{json}{sessionID} } @ev;
    is(scalar(@forged), 3, 'the three forged lines are stored (as the agent\'s)');
    my @real = grep { ($_->{json}{type} // '') eq 'step_finish' && $_->{json}{sessionID} } @ev;
    my ($in, $out, $cost) = (0, 0, 0);
    for (@real) {
        $in += $_->{json}{part}{tokens}{input};
        $out += $_->{json}{part}{tokens}{output};
        $cost += $_->{json}{part}{cost};
    }
    my $h = $s->run_hash($id);
    is($h->{tokens_input}, $in, "tokens_input: OpenCode's steps only ($in)");
    is($h->{tokens_output}, $out, "tokens_output: OpenCode's steps only ($out)");
    ok(abs($h->{cost} - $cost) < 1e-5, "cost: OpenCode's steps only ($h->{cost})");
};

subtest "3 MB of output against --max-event-bytes $BUDGET" => sub {
    my $id = $budget->{runId};
    my $r = $s->wait_done($id, 300);
    is($r->{status}, 'completed', 'completed') or $s->diag_run($id, $runner);
    is($r->{result}, 'Budget done.', 'the result, from a line after the budget');
    my @ev = $s->stored_events($id);
    my @w = grep { ($_->{json}{warning} // '') eq 'output budget exceeded' } @ev;
    is(scalar(@w), 1, 'one "output budget exceeded" warning');
    is($w[0] && $w[0]{json}{limit}, $BUDGET, '... naming the limit');
    my ($at) = grep { $ev[$_]{id} eq ($w[0] && $w[0]{id} // '') } 0 .. $#ev;
    my @after = defined $at ? grep { defined $_->{dts} } @ev[$at + 1 .. $#ev] : ();
    is(scalar(@after), 0, 'no line of the container stored after it');
    my @lines = grep { ($_->{data} // '') =~ /^0{900}/ } @ev;
    ok(@lines > 500 && @lines < 1100, scalar(@lines) . ' of the 3000 lines stored');
    my $h = $s->run_hash($id);
    my $sum = 0;
    $sum += length($_->{data}) for grep { defined $_->{dts} } @ev;
    ok($h->{event_bytes} <= $BUDGET, "event_bytes $h->{event_bytes} <= $BUDGET");
    is($h->{event_bytes}, $sum, 'event_bytes: the bytes of the stored lines');
    my @steps = grep { ($_->{json}{type} // '') eq 'step_finish' } @ev;
    my $stored_in = 0;
    $stored_in += $_->{json}{part}{tokens}{input} for @steps;
    ok($h->{tokens_input} > $stored_in, "tokens_input ($h->{tokens_input}) counts the steps "
       . "not stored too (stored: $stored_in)");
    my $d = SMCP::Test::sc($s->call('opencode_get_diff', { runId => $id }));
    like($d && $d->{diff} // '', qr/^\+kept$/m, 'the diff is stored');
    is_deeply([map { $_->{path} } @{ $r->{filesChanged} || [] }], ['budget.txt'], 'filesChanged');
};

##############################################################################
# a crash loop: the runner is killed on every take

ok($s->runner_alive($runner), 'the runner is still up');
my $log = $s->runner_log($runner);
my @bad = grep { /level=(error|crit)/ } split /\n/, $log;
is(scalar(@bad), 0, 'no error in the runner log') or diag(join "\n", @bad);
$s->stop_runner($runner, 'TERM');

subtest 'a run that kills its runner on every take' => sub {
    my $t0 = time();
    my $name = $s->runner_name . '-loop';
    my $lr = $s->start_runner(name => $name, concurrency => 1);
    my $run = $s->run_task(task => 'SCENARIO-LOOP: the model hangs', title => 'loop',
                           timeoutSeconds => 300);
    my $id = $run->{runId};
    ok(wait_until(60, sub { ($s->run_hash($id)->{status} // '') eq 'running' }, 0.2),
       'running') or $s->diag_run($id, $lr);
    for my $take (1 .. 3) {
        is($s->run_hash($id)->{attempts}, $take, "take $take: attempts $take");
        $s->stop_runner($lr, 'KILL');
        $lr = $s->start_runner(name => $name, concurrency => 1);
        last if $take == 3;
        # the log file is the name's: this process's line
        ok(wait_until(30, sub { $s->runner_log($lr) =~ /pid=$lr->{pid} run=\Q$id\E.*re-attached/ },
                      0.2), 'the restarted runner re-attached') or diag($s->runner_log_tail($lr, 10));
    }
    my $r = $s->wait_done($id, 300);
    $s->timing('crash loop: run_task -> failed', time() - $t0);
    is($r->{status}, 'failed', 'failed on the 4th take') or $s->diag_run($id, $lr);
    like($r->{error} // '', qr/crashed its runner 3 times/, 'error: ' . ($r->{error} // 'null'));
    is($s->run_hash($id)->{attempts}, 4, 'attempts 4');
    ok(wait_until(20, sub { !$s->run_containers($id) }), 'its sandbox is removed');
    $s->stop_runner($lr, 'TERM');
};

##############################################################################

$s->done;
