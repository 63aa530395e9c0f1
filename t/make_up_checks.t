#!/usr/bin/env perl
# What `make up` checks and installs before it starts anything.
#
#   * its inputs, first (`make up-check`, then `.ci/stack up` again): no
#     model provider's key -> it names the variables to set and stops,
#     having started, made or written nothing; not root -> it says it
#     needs root (dockerd, iptables); not x86-64 -> it says so (the sandbox
#     image's OpenCode binary); SMCP_EGRESS=off needs none of them
#   * the packages: .ci/install-deps has two lists, what building and
#     running the stack needs (`--run`, make deps-run) and the test
#     toolchain; `make up` runs only the first (`make -n up`), `make test`
#     (and so CI, .ci/run) both and npm ci
#
# Runs no stack: every `make up` here stops at its checks.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(:all);
use SMCP::MakeUp;

my $root = repo_root();

###############################################################################
# no model provider: make up names the variables and stops

{
    my $up = SMCP::MakeUp->new(egress => 1, key => 0);
    my $state = $up->state;
    my $t0 = time();
    my ($rc, $out) = $up->up;
    isnt($rc, 0, "make up without a model key: stops (exit $rc)");
    like($out, qr/no model provider: set ANTHROPIC_API_KEY \(or OPENAI_API_KEY; AZURE_OPENAI_API_KEY with AZURE_OPENAI_BASE_URL; GOOGLE_API_KEY; CF_AIG_TOKEN with CF_AIG_BASE_URL; COMPAT_API_KEY with COMPAT_BASE_URL\)/,
         '... naming the variables to set') or diag($out);
    like($out, qr/e\.g\. ANTHROPIC_API_KEY=sk-ant-\.\.\. make up/, '... and how');
    unlike($out, qr/is up\./, '... and claims nothing');
    my @made = glob("$state/*");
    is_deeply(\@made, [], '... having written nothing in its state directory')
        or diag("@made");
    my $nets = `docker network ls --format '{{.Name}}' 2>/dev/null`;
    unlike($nets, qr/^\Q${\ $up->net}\E$/m, '... nor made its sandbox network');
    diag(sprintf('make up stopped in %.1f s', time() - $t0));

    # `make up` itself: the check comes before the packages and the build
    my ($mrc, $mout, $merr) = run_cmd(['make', '-C', $root, 'up'], timeout => 120);
    isnt($mrc, 0, 'make up (the target) without a model key: stops');
    like($merr, qr/no model provider: set ANTHROPIC_API_KEY/, '... saying so');
    unlike($mout, qr{install-deps|smcp-embed|\bcc\b}, '... before installing or building anything')
        or diag($mout);
    is_deeply([ glob("$state/*") ], [], '... nothing written');

    # the keys a provider needs with it: its base URL
    {
        local $ENV{AZURE_OPENAI_API_KEY} = 'azure-check';
        delete local $ENV{AZURE_OPENAI_BASE_URL};
        my ($arc, $aout) = $up->stack('check');
        isnt($arc, 0, 'AZURE_OPENAI_API_KEY without AZURE_OPENAI_BASE_URL: stops');
        like($aout, qr/set AZURE_OPENAI_BASE_URL/, '... naming it');
    }
    # SMCP_EGRESS=off: no sandbox, no model needed
    {
        local $ENV{SMCP_EGRESS} = 'off';
        my ($orc, $oout) = $up->stack('check');
        is($orc, 0, 'SMCP_EGRESS=off: no key needed') or diag($oout);
    }
}

###############################################################################
# root, x86-64

{
    my $up = SMCP::MakeUp->new(egress => 1);

    # x86-64: what uname -m says (a stand-in on PATH saying aarch64)
    my $bin = tempdir('smcp-arch-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    spew("$bin/uname", "#!/bin/sh\n[ \"\$1\" = -m ] && { echo aarch64; exit 0; }\nexec /bin/uname \"\$@\"\n");
    chmod 0755, "$bin/uname";
    {
        local $ENV{PATH} = "$bin:$ENV{PATH}";
        my ($rc, $out) = $up->stack('check');
        isnt($rc, 0, 'on aarch64: make up stops');
        like($out, qr/make up needs an x86-64 machine: the sandbox image's OpenCode binary is x86-64 .*this one is aarch64/,
             '... saying it needs x86-64, and what this is') or diag($out);
    }

    # root: as nobody
    SKIP: {
        skip_or_fail('not root: the root check runs as root, as nobody', 3) unless $> == 0;
        my ($rc, $out, $err) = run_cmd(['setpriv', '--reuid=nobody', '--regid=nogroup',
                                        '--clear-groups', "$root/.ci/stack", 'check'],
                                       timeout => 60);
        isnt($rc, 0, 'not root: make up stops');
        like($err, qr/make up needs root: it starts dockerd and sets the sandbox network's iptables rules/,
             '... saying why it needs root') or diag($err);
        ($rc, $out, $err) = run_cmd(['setpriv', '--reuid=nobody', '--regid=nogroup',
                                     '--clear-groups', 'env', 'SMCP_EGRESS=off',
                                     "$root/.ci/stack", 'check'], timeout => 60);
        is($rc, 0, '... SMCP_EGRESS=off needs no root') or diag($err);
    }

    my ($rc, $out) = $up->stack('check');
    is($rc, 0, 'root, x86-64, a model key: the check passes') or diag($out);
}

###############################################################################
# the packages: make up installs the stack's, make test the toolchain too

{
    my @run = split /\n/, `$root/.ci/install-deps --list run`;
    my @test = split /\n/, `$root/.ci/install-deps --list test`;
    my %run = map { $_ => 1 } @run;
    my %test = map { $_ => 1 } @test;
    # building: the module (nginx-dev), the runner and the token tool;
    # running: nginx, Redis, the engine, the sandbox network, the images
    for my $p (qw(build-essential nginx-dev libhiredis-dev libjansson-dev
                  libcurl4-openssl-dev libssl-dev nginx redis-server redis-tools
                  docker.io iptables iproute2 mmdebstrap eatmydata nodejs curl
                  ca-certificates)) {
        ok($run{$p}, "the run list (make up) has $p");
    }
    for my $p (qw(chromium prometheus clang llvm libclang-rt-14-dev wrk
                  docker-compose dnsmasq-base dpkg-dev zip)) {
        ok($test{$p} && !$run{$p}, "$p is the test toolchain's, not make up's");
    }
    is_deeply([ grep { $test{$_} } @run ], [], 'no package in both lists');

    my ($rc, $n) = run_cmd(['make', '-n', '--no-print-directory', '-C', $root, 'up'], timeout => 60);
    is($rc, 0, 'make -n up');
    my @lines = split /\n/, $n;
    is($lines[0], '.ci/stack check', 'make up: its check first');
    ok((grep { $_ eq '.ci/install-deps --run' } @lines), '... then the run list only')
        or diag($n);
    ok(!(grep { /install-deps\s*$|npm ci|install-deps --list/ } @lines),
       '... never the whole list or npm');
    ($rc, $n) = run_cmd(['make', '-n', '--no-print-directory', '-C', $root, 'test'], timeout => 60);
    ok((grep { $_ eq '.ci/install-deps' } split /\n/, $n), 'make test installs both lists (CI: .ci/run runs make test)')
        or diag($n);
    like(slurp("$root/.ci/run"), qr/^make test$/m, '.ci/run runs make test');
}

done_testing();
