#!/usr/bin/env perl
# The harness `make test` runs (t/lib/SMCP/Harness.pm), on test files of
# its own in a temp dir, through prove as the Makefile calls it:
#
#   1. side by side: two files run at once (each waits to see the other
#      started), and a file marked `alone` starts after both ended, the
#      `alone` files one by one in the schedule's order, and a file marked
#      `beside` runs while they run, not before
#   1b. a file marked `swarm` starts before the others and runs beside
#      them, and the files marked `published` start only after it ended
#   1c. of the files marked `sandboxes`, at most SMCP_TEST_SANDBOX_JOBS
#      run at once (the next waits for one to end), and a file not marked
#      runs beside them meanwhile; without the setting, side by side
#   2. the files marked `sanitized` start with the environment of
#      SMCP_TEST_SANITIZED_ENV's file, the others without it
#   3. under CI=true a file that skips everything, or skips one test, fails
#      (saying so), and passes without CI
#   4. each file's time is printed, slowest first, with when it started,
#      before prove's result
#   4b. a failed file's last words (its failed tests' diagnostics, a die
#      outside eval, SMCP::Report) are printed after the times, above
#      prove's summary; a file that passes leaves nothing behind
#   5. no test file calls BAIL_OUT (it would stop the files beside it)
#   6. the files t/schedule runs beside the alone ones run no docker and
#      no runner
#   7. a test's free ports come from below the kernel's ephemeral range,
#      held by the file that picked them until it ends

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;

use SMCP::Test qw(spew run_cmd);

my $lib = "$FindBin::Bin/lib";
my $dir = tempdir('smcp-harness-XXXXXX', TMPDIR => 1, CLEANUP => 1);

# prove as make test calls it, on FILES, with ENV: (exit code, output)
sub prove {
    my ($files, %env) = @_;
    local @ENV{keys %env} = values %env;
    local $ENV{PERL5LIB} = $lib;
    local $ENV{SMCP_TEST_SCHEDULE} = "$dir/schedule";
    my ($rc, $out, $err) = run_cmd(['prove', '--harness', 'SMCP::Harness', '-j', '3',
                                    map { "$dir/$_" } @$files], timeout => 60, dir => $dir);
    return ($rc, "$out$err");
}

my $wait = <<'PL';
sub wait_for { my ($f) = @_; for (1 .. 600) { return 1 if -e $f; select(undef, undef, undef, 0.05) } 0 }
PL

spew("$dir/schedule", <<"S");
# a test schedule
alone      $dir/zfirst.t
alone      $dir/alone.t
beside     $dir/beside.t
sanitized  $dir/san*.t
swarm      $dir/sw.t
published  $dir/pub*.t
sandboxes  $dir/hv*.t
S
for my $me (qw(par1 par2)) {
    my $other = $me eq 'par1' ? 'par2' : 'par1';
    spew("$dir/$me.t", <<"PL");
use Test::More;
$wait
open(my \$fh, '>', '$dir/$me.start') or die; close \$fh;
ok(wait_for('$dir/$other.start'), '$me runs while $other runs');
ok(!-e '$dir/alone.start', 'alone has not started');
open(\$fh, '>', '$dir/$me.end') or die; close \$fh;
done_testing;
PL
}
# the alone files one by one in the schedule's order (zfirst.t, then
# alone.t), beside.t beside them
spew("$dir/zfirst.t", <<"PL");
use Test::More;
$wait
ok(-e '$dir/par1.end' && -e '$dir/par2.end', 'alone starts after the others ended');
open(my \$fh, '>', '$dir/zfirst.start') or die; close \$fh;
ok(wait_for('$dir/beside.start'), 'it runs while beside runs');
open(\$fh, '>', '$dir/zfirst.end') or die; close \$fh;
done_testing;
PL
spew("$dir/alone.t", <<"PL");
use Test::More;
ok(-e '$dir/zfirst.end', 'the alone files one by one, in the order of the schedule');
done_testing;
PL
spew("$dir/beside.t", <<"PL");
use Test::More;
$wait
ok(-e '$dir/par1.end' && -e '$dir/par2.end', 'beside starts after the side-by-side files ended');
open(my \$fh, '>', '$dir/beside.start') or die; close \$fh;
ok(wait_for('$dir/zfirst.start'), 'beside runs while an alone file runs');
done_testing;
PL
# the swarm file first, beside it the others, the published ones after it
spew("$dir/sw.t", <<"PL");
use Test::More;
$wait
open(my \$fh, '>', '$dir/sw.start') or die; close \$fh;
ok(wait_for('$dir/other.start'), 'swarm runs while another file runs');
ok(!glob('$dir/pub*.start'), 'no published file has started');
open(\$fh, '>', '$dir/sw.end') or die; close \$fh;
done_testing;
PL
spew("$dir/other.t", <<"PL");
use Test::More;
$wait
open(my \$fh, '>', '$dir/other.start') or die; close \$fh;
ok(wait_for('$dir/sw.end'), 'the swarm file ended while this one ran');
done_testing;
PL
for my $n (1, 2) {
    spew("$dir/pub$n.t", <<"PL");
use Test::More;
ok(-e '$dir/sw.end', 'pub$n starts after the swarm file ended');
open(my \$fh, '>', '$dir/pub$n.start') or die; close \$fh;
done_testing;
PL
}
# two `sandboxes` files and a light one: one sandboxes file at a time
spew("$dir/hv1.t", <<"PL");
use Test::More;
$wait
open(my \$fh, '>', '$dir/hv1.start') or die; close \$fh;
ok(wait_for('$dir/lt.start'), 'a file not marked runs beside it');
select(undef, undef, undef, 0.5);
ok(!-e '$dir/hv2.start', 'the other sandboxes file waits');
open(\$fh, '>', '$dir/hv1.end') or die; close \$fh;
done_testing;
PL
spew("$dir/hv2.t", <<"PL");
use Test::More;
ok(-e '$dir/hv1.end', 'hv2 starts after hv1 ended');
open(my \$fh, '>', '$dir/hv2.start') or die; close \$fh;
done_testing;
PL
spew("$dir/lt.t", <<"PL");
use Test::More;
open(my \$fh, '>', '$dir/lt.start') or die; close \$fh;
ok(1, 'light');
done_testing;
PL
spew("$dir/san.t", <<'PL');
use Test::More;
is($ENV{SMCP_TEST_SANITIZED}, 1, 'marked sanitized');
is($ENV{ASAN_OPTIONS}, 'halt_on_error=1', 'the environment file\'s ASAN_OPTIONS');
is($ENV{SMCP_UNIT_CFLAGS}, '-fsanitize=address -O1', '... a value with a space');
done_testing;
PL
spew("$dir/plain.t", <<'PL');
use Test::More;
ok(!exists $ENV{SMCP_TEST_SANITIZED} && !exists $ENV{ASAN_OPTIONS}, 'not sanitized');
done_testing;
PL
spew("$dir/asan.env", "# the sanitizers\nASAN_OPTIONS=halt_on_error=1\n"
                    . "SMCP_UNIT_CFLAGS=-fsanitize=address -O1\n");
my $uses = "use lib '$lib'; use Test::More; use SMCP::Test;";
spew("$dir/died.t", <<"PL");
$uses
ok(1, 'first');
eval { die "inside an eval\\n" };
die "the stack did not come up: the sentinels said nothing\\n";
PL
spew("$dir/failing.t", <<"PL");
$uses
ok(1, 'first');
is(2, 3, 'two is three');
if (fork() == 0) { die "a forked child\\n" }
wait;
done_testing;
PL
spew("$dir/passing.t", <<"PL");
$uses
ok(1, 'first'); eval { die "passing's eval\\n" }; done_testing;
PL
spew("$dir/skipall.t", "use Test::More; plan skip_all => 'no frobnicator';\n");
spew("$dir/skipone.t", "use Test::More; SKIP: { skip 'no widget', 1; ok(1) } ok(1); done_testing;\n");

# the files here choose their own (make test runs this file with them)
delete local @ENV{qw(CI ASAN_OPTIONS SMCP_TEST_SANITIZED_ENV SMCP_TEST_SANITIZED_ONLY
                     SMCP_TEST_SANITIZED SMCP_TEST_SANDBOX_JOBS)};

subtest 'side by side, then alone, and beside the alone ones' => sub {
    my ($rc, $out) = prove([qw(alone.t beside.t par1.t par2.t zfirst.t)]);
    is($rc, 0, 'all pass') or diag($out);
    like($out, qr/^Result: PASS$/m, 'Result: PASS');
};

subtest 'the swarm file first, the published ones after it' => sub {
    my ($rc, $out) = prove([qw(pub1.t pub2.t other.t sw.t)]);
    is($rc, 0, 'all pass') or diag($out);
    like($out, qr/^Result: PASS$/m, 'Result: PASS');
};

subtest 'at most SMCP_TEST_SANDBOX_JOBS sandboxes files at once' => sub {
    my ($rc, $out) = prove([qw(hv1.t hv2.t lt.t)], SMCP_TEST_SANDBOX_JOBS => 1);
    is($rc, 0, 'all pass') or diag($out);
    unlink map { "$dir/$_" } qw(hv1.start hv1.end hv2.start lt.start);
    # without the cap the two start together: hv2 fails
    ($rc, $out) = prove([qw(hv1.t hv2.t lt.t)]);
    isnt($rc, 0, 'without SMCP_TEST_SANDBOX_JOBS they run side by side') or diag($out);
};

subtest 'sanitized files get the environment, others not' => sub {
    my ($rc, $out) = prove([qw(san.t plain.t)], SMCP_TEST_SANITIZED_ENV => "$dir/asan.env");
    is($rc, 0, 'both pass') or diag($out);
    ($rc, $out) = prove([qw(san.t plain.t)], SMCP_TEST_SANITIZED_ENV => "$dir/asan.env",
                        SMCP_TEST_SANITIZED_ONLY => 1);
    like($out, qr/Files=1,/, 'SMCP_TEST_SANITIZED_ONLY=1: the sanitized file alone') or diag($out);
};

subtest 'a skip is a failure under CI=true' => sub {
    my ($rc, $out) = prove([qw(skipall.t skipone.t plain.t)]);
    is($rc, 0, 'without CI: passes') or diag($out);
    like($out, qr/2 skip\(s\)/, '... counting the skips');
    ($rc, $out) = prove([qw(skipall.t skipone.t plain.t)], CI => 'true');
    isnt($rc, 0, 'CI=true: fails');
    like($out, qr/skipped under CI=true: no frobnicator/, '... the skipped file, with its reason');
    like($out, qr/test 1 skipped under CI=true/, '... the skipped test');
    like($out, qr/^Result: FAIL$/m, 'Result: FAIL');
};

subtest 'each file\'s time' => sub {
    my ($rc, $out) = prove([qw(plain.t skipone.t)]);
    like($out, qr/^Time per file \(wall, slowest first; when it started\):\n(  \S+\.t +\d+\.\d s  \+\d+ s\n){2}  total /m,
         'a line per file, then the total') or diag($out);
    like($out, qr/Time per file[\s\S]*^Result: PASS$/m, '... before the result line');
};

subtest 'why a file failed' => sub {
    my $tmp = "$dir/tmp";
    mkdir $tmp;
    my ($rc, $out) = prove([qw(died.t failing.t passing.t)], TMPDIR => $tmp);
    isnt($rc, 0, 'two files fail');
    like($out, qr/^Why \S*died\.t failed \(its last words\):\n  died after test 1: the stack did not come up: the sentinels said nothing$/m,
         'a die outside eval: its message, after which test') or diag($out);
    my ($why) = $out =~ /^(Why [\s\S]*)^Test Summary Report/m;
    unlike($why // '', qr/inside an eval|a forked child/,
           '... not a die inside eval, nor a child\'s');
    like($out, qr/^Why \S*failing\.t failed \(its last words\):\n  #   Failed test 'two is three'\n  #   at \S+ line \d+\.\n  #          got: '2'/m,
         'a failed test: its diagnostics');
    unlike($out, qr/Why \S*passing\.t/, 'nothing of a file that passed');
    like($out, qr/Time per file[\s\S]*Why [\s\S]*^Test Summary Report/m,
         '... after the times, above prove\'s summary');
    is_deeply([glob("$tmp/smcp-reports-*")], [], 'the reports\' directory removed');
};

# the ports files running side by side pick: below the kernel's ephemeral
# range (outgoing connections never take them), each held by its file
# while the file runs, and let go at its end
subtest 'free ports' => sub {
    my ($lo) = SMCP::Test::slurp('/proc/sys/net/ipv4/ip_local_port_range') =~ /^(\d+)/;
    my $pl = 'use SMCP::Test; my $p = SMCP::Test::free_port(); my $d = ($ENV{TMPDIR} // "/tmp")'
           . ' . "/smcp-test-ports"; print "$p ", (-e "$d/$p" ? "held" : "free"), "\n";';
    my ($rc, $out) = run_cmd(['perl', "-I$lib", '-e', $pl], timeout => 30);
    my ($port, $held) = $out =~ /^(\d+) (\w+)$/m;
    ok($port && $lo && $port < $lo, "port $port, below the ephemeral range ($lo)")
        or diag($out);
    is($held, 'held', '... held by the file while it runs');
    ok($port && !-e ($ENV{TMPDIR} // '/tmp') . "/smcp-test-ports/$port", '... and let go at its end');
};

# t/schedule's `beside` files run while runner_swarm.t owns the Docker
# engine and hostile_agent.t counts what its runs left on it: none of them
# may touch Docker (a runner, a container, a stack)
{
    my $sched = SMCP::Test::slurp("$FindBin::Bin/schedule");
    my @beside = map { "$FindBin::Bin/../$_" } $sched =~ /^beside\s+(\S+)/mg;
    my $uses = join('|', 'docker', map { "SMCP::$_\\b" } qw(Stack MakeUp Clients));
    my @docker = grep { !/harness\.t$/ && SMCP::Test::slurp($_) =~ /$uses|start_runner/ }
                 map { glob } @beside;
    ok(@beside > 0, scalar(@beside) . ' files run beside the alone ones');
    is_deeply([map { s{.*/}{}r } @docker], [], '... and none of them runs docker or a runner');
}

# a file that cannot go on gives up alone (SMCP::Test::give_up): a
# BAIL_OUT would stop every file running beside it, their stacks left up
{
    my @bail = grep { !/harness\.t$/ && SMCP::Test::slurp($_) =~ /\bBAIL_OUT\s*\(/ }
               glob("$FindBin::Bin/*.t");
    is_deeply([map { s{.*/}{}r } @bail], [], 'no test file calls BAIL_OUT (give_up instead)');
}

done_testing;
