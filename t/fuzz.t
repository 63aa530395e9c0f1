#!/usr/bin/env perl
# The fuzz harnesses (fuzz/*.c), each fuzzed for a bounded time: `make
# fuzz-ci` (libFuzzer with ASan and UBSan, FUZZ_CI_SECONDS each, one per
# core) as part of `make test`. A crash, a leak, a timeout, running out of
# memory or any sanitizer report fails its harness; the input that did it
# is kept in build/fuzz/crashes/<harness>/ (copy it to
# fuzz/regress/<harness>/ and t/fuzz_regress.t keeps it found).
#
# t/schedule runs this file beside the `alone` ones.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(basename);
use Test::More;

use SMCP::Test qw(repo_root run_cmd);

my $root = repo_root();
my @harnesses = sort map { basename($_, '.c') }
                grep { basename($_) ne 'driver.c' } glob("$root/fuzz/*.c");
ok(@harnesses >= 6, scalar(@harnesses) . ' harnesses in fuzz/');

# make fuzz-ci: the build, then each harness's line (and, on a failure,
# the end of its log and the inputs it wrote).  Niced: each fuzzer runs
# for its time whatever it gets, and the files beside it (the `alone`
# ones, timing their sandboxes) come first
my ($rc, $out, $err) = run_cmd(['nice', '-n', '10', 'make', '--no-print-directory', 'fuzz-ci'],
                               dir => $root, timeout => 1800);
is($rc, 0, 'make fuzz-ci') or diag("$out$err");

for my $h (@harnesses) {
    my ($line) = $out =~ /^(fuzz: \Q$h\E +\d+ s .*)$/m;
    my ($runs, $exit) = ($line // '') =~ /(\d+) runs .* exit (\d+)$/;
    ok(defined $exit && $exit == 0 && $runs > 0,
       "$h: fuzzed without a report" . ($line ? " ($line)" : ' (no line)'))
        or diag(($out =~ /^(fuzz: \Q$h\E .*?)(?=^fuzz: |\z)/ms)[0] // $out);
}

done_testing;
