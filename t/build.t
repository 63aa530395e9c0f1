#!/usr/bin/perl

# Build outputs: the dynamic module (warning-free: nginx compiles addon code
# with -Werror), Debian's nginx accepts it with load_module (`nginx -t`),
# the token CLI, the static nginx with the module built in, and the
# runner: the release build (`make`, the runner image) has no test hook
# and refuses to start with a hook's variable set; only the test build
# (`make runner-test`) has them.  The version, written once
# (common/smcp_version.h): `--version` of smcp-token and smcp-runner; the
# runner's --help; `make help` lists every target of the Makefile, one line
# each, from its opening comment.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(hmac_sha256);
use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(repo_root module_path static_nginx_path b64url slurp skip_or_fail
                  run_cmd smcp_version);

my $root = repo_root();
my $so = module_path();
my $static = static_nginx_path();

my $dir = tempdir('smcp-build-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{SMCP_TEST_KEEP});

sub conf {
    my (%o) = @_;
    my $user = $> == 0 ? 'user root;' : '';
    my $load = $o{load} ? "load_module $so;" : '';
    my $events = $o{poll} ? 'use poll;' : '';
    return <<"EOF";
$load
$user
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log info;
events { worker_connections 64; $events }
http {
    access_log off;
    client_body_temp_path $dir/cbt;
    proxy_temp_path $dir/pt;
    fastcgi_temp_path $dir/ft;
    uwsgi_temp_path $dir/ut;
    scgi_temp_path $dir/st;
    sandbox_mcp_redis 127.0.0.1:6399;
    sandbox_mcp_redis_prefix smcp:;
    sandbox_mcp_redis_timeout 3s;
    sandbox_mcp_secret_file $dir/secret;
    server {
        listen 127.0.0.1:65431;
        location /mcp {
            sandbox_mcp;
            sandbox_mcp_allowed_hosts localhost 127.0.0.1 [::1];
            sandbox_mcp_allowed_origins http://localhost:8080;
            sandbox_mcp_max_body 1m;
            sandbox_mcp_session_ttl 24h;
            sandbox_mcp_github_host github.com;
            sandbox_mcp_public_url http://127.0.0.1:8080;
            sandbox_mcp_max_wait 60s;
            sandbox_mcp_max_task_size 64k;
            sandbox_mcp_run_timeout 1h;
            sandbox_mcp_run_timeout_max 24h;
            sandbox_mcp_default_model anthropic/claude-sonnet-4-5;
            sandbox_mcp_page_size 100;
        }
    }
}
EOF
}

{
    open(my $fh, '>', "$dir/secret") or die;
    print $fh 'build-test-secret-0123456789';
    close $fh;
}

sub write_conf {
    my ($name, $text) = @_;
    open(my $fh, '>', "$dir/$name") or die "$dir/$name: $!";
    print $fh $text;
    close $fh;
    return "$dir/$name";
}

sub nginx_t {
    my ($bin, $conf) = @_;
    my $out = `$bin -t -p $dir/ -c $conf -e $dir/error.log 2>&1`;
    return ($? >> 8, $out);
}

###############################################################################
# dynamic module

SKIP: {
    skip_or_fail("$so not built (run `make`)", 7) unless -f $so;
    is(substr(slurp($so), 0, 4), "\x7fELF", 'dynamic module built: an ELF object');

    # warnings are errors in the build that produced it
    my ($cflags) = slurp("$root/build/nginx-obj/Makefile") =~ /^CFLAGS\s*=\s*(.*)$/m;
    like($cflags // '', qr/-Werror\b/, 'module compiled with -Werror (warning-free)');
    like($cflags // '', qr/-Wall\b/, '... and -Wall');

    # nginx -t with load_module and every directive of the contract
    my $conf = write_conf('dyn.conf', conf(load => 1));
    my ($rc, $out) = nginx_t('/usr/sbin/nginx', $conf);
    is($rc, 0, 'nginx -t with load_module passes') or diag($out);
    like($out, qr/test is successful/, 'test is successful');
    unlike($out, qr/\[(warn|emerg|alert|crit)\]/, 'no warnings from nginx -t');

    # a bad directive value is refused at config time
    my $bad = conf(load => 1);
    $bad =~ s/sandbox_mcp_page_size 100;/sandbox_mcp_page_size zero;/;
    ($rc, $out) = nginx_t('/usr/sbin/nginx', write_conf('bad.conf', $bad));
    isnt($rc, 0, 'an invalid directive value fails nginx -t');
}

###############################################################################
# token CLI

SKIP: {
    my $cli = "$root/build/smcp-token";
    skip_or_fail('build/smcp-token not built', 5) unless -x $cli;
    my ($rc, $tok) = run_cmd([$cli, '--sub', 'alice', '--ttl', '120',
                              '--secret-file', "$dir/secret"]);
    is($rc, 0, 'smcp-token runs');
    chomp $tok;
    my ($h, $p, $s) = split /\./, $tok;
    ok(defined $s, 'prints a JWT') or diag($tok);
    is(b64url(hmac_sha256("$h.$p", 'build-test-secret-0123456789')), $s // '',
       'signed with HS256 and the secret file');
    my ($hdr, $cl) = SMCP::Test::decode_jwt($tok);
    is($cl->{sub}, 'alice', 'sub');
    ok(($cl->{exp} // 0) > time() && $cl->{exp} <= time() + 121, 'exp = now + ttl');
}

###############################################################################
# the runner: test hooks only in the test build

# the runner started with extra environment: (exit status, output); a
# runner that does not stop on its own within 30 s is killed (status 124)
sub runner_with_env {
    my ($bin, %env) = @_;
    local @ENV{keys %env} = values %env;
    my $out = `timeout -s KILL 30 $bin --redis 127.0.0.1:9 --secret-file $dir/secret --egress-url http://127.0.0.1:9 --image none --network none --docker-socket $dir/no-docker.sock --name build-t 2>&1`;
    return ($? & 127 ? 124 : $? >> 8, $out);
}

SKIP: {
    my $rel = "$root/build/smcp-runner";
    skip_or_fail('build/smcp-runner not built (run `make`)', 8) unless -x $rel;
    ok(index(slurp($rel), 'HOLD_RUNNING') < 0,
       'the release runner holds no test hook (SMCP_RUNNER_TEST_HOLD_RUNNING '
       . 'is not in it)');
    my %names = map { $_ => 1 } slurp($rel) =~ /(SMCP_\w*TEST\w*)/g;
    is_deeply([ sort keys %names ], [ 'SMCP_RUNNER_TEST_' ],
              '... its only test name: the prefix it refuses');
    for my $var ('SMCP_RUNNER_TEST_HOLD_RUNNING', 'SMCP_RUNNER_TEST_ANY') {
        my ($rc, $out) = runner_with_env($rel, $var => 600);
        is($rc, 2, "the release runner with $var set: refuses to start (exit 2)");
        like($out, qr/^smcp-runner: \Q$var\E is set: SMCP_RUNNER_TEST_\* variables are test hooks, which only the test build \(make runner-test\) has; this runner is a release build and will not start with one: unset it$/m,
             '... saying why') or diag($out);
    }
    my $docker = slurp("$root/runner/Dockerfile");
    like($docker, qr/^RUN make runner$/m, 'the runner image builds the release runner');
    unlike($docker, qr/runner-test|RUNNER_TEST_HOOKS/, '... and not the test build');
}

# the module and the token tool: no test hook at all
for my $bin ($so, $static, "$root/build/smcp-token") {
    SKIP: {
        skip_or_fail("$bin not built", 1) unless -f $bin;
        is_deeply([ slurp($bin) =~ /(SMCP_\w*TEST\w*)/g ], [],
                  "$bin: no SMCP_*TEST* variable in it");
    }
}

###############################################################################
# the version: --version of both binaries; the runner's --help

my $version = smcp_version();
like($version, qr/^\d+\.\d+\.\d+(-[\w.]+)?$/, "common/smcp_version.h: $version");

for my $bin (qw(smcp-token smcp-runner)) {
    SKIP: {
        skip_or_fail("build/$bin not built", 3) unless -x "$root/build/$bin";
        my ($rc, $out, $err) = run_cmd(["$root/build/$bin", '--version']);
        is($rc, 0, "$bin --version: exit 0");
        is($out, "$bin $version\n", "... prints \"$bin $version\"");
        is($err, '', '... nothing on stderr');
    }
}

SKIP: {
    my $out = `make -s -C '$root' runner-test 2>&1`;
    skip_or_fail("make runner-test: $out", 1) if $?;
    ok(index(slurp("$root/build/test/smcp-runner"), 'SMCP_RUNNER_TEST_HOLD_RUNNING') >= 0,
       'the test build has the hook (t/runner_crash.t uses it)');
}

SKIP: {
    skip_or_fail('build/smcp-runner not built', 4) unless -x "$root/build/smcp-runner";
    my ($rc, $out, $err) = run_cmd(["$root/build/smcp-runner", '--help']);
    is($rc, 0, 'smcp-runner --help: exit 0');
    like($out, qr/^usage: smcp-runner \[options\]\n/, '... its usage on stdout');
    like($out, qr/^ +--version +/m, '... which names --version');
    is($err, '', '... nothing on stderr');
}

###############################################################################
# make help: the Makefile's targets, one line each, from its opening comment

{
    my ($rc, $out, $err) = run_cmd(['make', '-s', '-C', $root, 'help']);
    is($rc, 0, 'make help: exit 0') or diag($err);
    my @lines = split /\n/, $out;
    is(shift(@lines), "sandbox-mcp $version: make TARGET [VAR=value ...]",
       '... the version first');
    my @bad = grep { !/^  make ([\w-]+) +\S/ || length($_) > 80 } @lines;
    is_deeply(\@bad, [], '... then "make TARGET  what it does", one line each, '
                        . 'within 80 columns');
    my @listed = sort map { /^  make ([\w-]+)/ ? $1 : () } @lines;
    my @phony = sort map { split ' ' }
                     slurp("$root/Makefile") =~ /^\.PHONY:(.*)$/mg;
    is("@listed", "@phony", 'every .PHONY target of the Makefile, once ('
                            . scalar(@phony) . ')');
}

###############################################################################
# static nginx

SKIP: {
    skip_or_fail("$static not built (run `make static`)", 8) unless -x $static;
    my $v = `$static -V 2>&1`;
    is($? >> 8, 0, 'static nginx -V runs');
    like($v, qr{nginx/1\.22\.1}, 'nginx 1.22.1');
    like($v, qr{--add-module=\Q$root\E/?(\s|$)}, '--add-module with the repo path');
    like($v, qr{--with-poll_module}, '--with-poll_module');
    my $conf = write_conf('static.conf', conf(load => 0, poll => 1));
    my ($rc, $out) = nginx_t($static, $conf);
    is($rc, 0, 'static nginx -t (no load_module, use poll) passes') or diag($out);
    unlike($out, qr/\[(warn|emerg|alert|crit)\]/, 'no warnings');
    SKIP: {
        my ($objs) = glob("$root/build/nginx-static/build/nginx-*/objs/Makefile");
        skip('static objs/Makefile not kept: no -Werror check', 1) unless $objs;
        my ($cf) = slurp($objs) =~ /^CFLAGS\s*=\s*(.*)$/m;
        like($cf // '', qr/-Werror\b/, 'static build compiles with -Werror too');
    }
    my $bad = conf(load => 0);
    $bad =~ s/sandbox_mcp;/sandbox_mcp; sandbox_mcp_no_such_directive on;/;
    ($rc) = nginx_t($static, write_conf('static-bad.conf', $bad));
    isnt($rc, 0, 'an unknown directive fails');
}

done_testing();
