#!/usr/bin/env perl
# The fuzz harnesses (fuzz/*.c) as regression tests: each one built with
# ASan and UBSan around fuzz/driver.c instead of libFuzzer (clang if there
# is one, else cc), then run once over its seeds (fuzz/corpus/<harness>/)
# and once per input that crashed it (fuzz/regress/<harness>/).  A
# sanitizer report, a leak or a broken invariant of the harness fails.
#
# Needs only a C compiler with the sanitizers (no libFuzzer, no Docker):
# `make fuzz` finds the inputs, this file keeps them found.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(basename);
use File::Path qw(make_path);
use Test::More;

use SMCP::Test qw(repo_root slurp require_prereqs which_bin);

my $root = repo_root();
my $out = "$root/build/fuzz-regress";
make_path($out);

my ($cc) = grep { which_bin($_) } qw(clang cc);
require_prereqs('a C compiler (clang or cc)') unless $cc;

my @common = glob("$root/ngx_sandbox_mcp_module/common/*.c");
my @harnesses = grep { basename($_) ne 'driver.c' } glob("$root/fuzz/*.c");
ok(@harnesses >= 6, scalar(@harnesses) . ' harnesses in fuzz/');

# halt on the first report; leaks count (LeakSanitizer at exit)
local $ENV{ASAN_OPTIONS} = 'halt_on_error=1:detect_leaks=1:abort_on_error=0';
local $ENV{UBSAN_OPTIONS} = 'print_stacktrace=1:halt_on_error=1';

# runs the harness over files (a hang counts: 120 s at most); returns
# (ok, the interesting part of stderr)
sub run_harness {
    my ($bin, @files) = @_;
    my $log = "$bin.run.log";
    my $rc = system(join(' ', map { quotemeta } 'timeout', '120', $bin, @files)
                    . ' 2>' . quotemeta($log));
    my $err = slurp($log);
    my @lines = grep { /SUMMARY|runtime error|ERROR: |invariant broken|driver:/ }
                split /\n/, $err;
    push @lines, 'timed out after 120 s' if ($rc >> 8) == 124;
    # the last input named before the report is the one that caused it
    return ($rc == 0 && $err !~ /Sanitizer|runtime error|invariant broken/,
            join("\n", @lines[-($#lines < 7 ? $#lines + 1 : 8) .. -1]));
}

# each source compiled once (an object under $out/obj/), each harness
# linked from its own, the driver's, those its links line names and
# common/'s; (ok, the compiler's words)
my @cflags = ('-g', '-O1', '-fsanitize=address,undefined',
              '-fno-sanitize-recover=undefined', '-fno-omit-frame-pointer',
              '-Wall', '-Wextra', '-Wno-unused-parameter', '-Werror',
              '-D_GNU_SOURCE', "-I$root/ngx_sandbox_mcp_module/common",
              "-I$root/runner", "-I$root/fuzz", "-I$root/t/unit");
my %obj;
sub cc_ok {
    my ($log, @cmd) = @_;
    my $ok = system(join(' ', map { quotemeta } @cmd) . ' 2>' . quotemeta($log)) == 0;
    return ($ok, $ok ? '' : slurp($log));
}
sub object {
    my ($src) = @_;
    return $obj{$src} if exists $obj{$src};
    (my $rel = substr($src, length($root) + 1)) =~ s{/}{__}g;
    my $o = "$out/obj/$rel.o";
    make_path("$out/obj");
    my ($ok, $err) = cc_ok("$o.log", $cc, @cflags, '-c', '-o', $o, $src);
    return $obj{$src} = $ok ? $o : { error => "$src: $err" };
}

for my $src (@harnesses) {
    my $h = basename($src, '.c');
    my ($links) = slurp($src) =~ /^ \* links: (.*)$/m;
    my @links = map { "$root/$_" } split ' ', $links // '';
    my $bin = "$out/$h";

    my @objs = map { object($_) } $src, "$root/fuzz/driver.c", @links, @common;
    my @bad = map { $_->{error} } grep { ref } @objs;
    my ($ok, $err) = @bad ? (0, join("\n", @bad))
                          : cc_ok("$bin.build.log", $cc, '-fsanitize=address,undefined',
                                  '-o', $bin, @objs, '-lhiredis', '-ljansson', '-lcrypto');
    if (!ok($ok, "$h: builds with ASan and UBSan ($cc)")) {
        diag($err);
        next;
    }

    my @seeds = sort glob("$root/fuzz/corpus/$h/*");
    ok(@seeds > 0, "$h: has seeds in fuzz/corpus/$h/");
    if (@seeds) {
        my ($ok, $why) = run_harness($bin, @seeds);
        ok($ok, "$h: its " . scalar(@seeds) . " seeds run clean") or diag($why);
    }

    for my $f (sort glob("$root/fuzz/regress/$h/*")) {
        my ($ok, $why) = run_harness($bin, $f);
        ok($ok, "$h: regress/" . basename($f)) or diag($why);
    }
}

done_testing();
