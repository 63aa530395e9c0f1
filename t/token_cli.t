#!/usr/bin/perl

# smcp-token's command-line habits (no nginx, no Redis): --help prints the
# usage on stdout and exits 0, a bad option prints it on stderr and exits
# 2; --version; --ttl takes a duration with a unit (30d, 12h, 90m, 3600s)
# or plain seconds, and refuses anything else naming the option, minting
# nothing; a minted token goes alone on stdout, its jti and expiry
# (ISO-8601 UTC) on stderr.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use SMCP::Test qw(token_tool_path run_cmd smcp_version spew iso2epoch
                  require_prereqs);

my $cli = token_tool_path();
require_prereqs("$cli (run `make tools`)") unless -x $cli;

my $dir = tempdir('smcp-token-cli-XXXXXX', TMPDIR => 1, CLEANUP => 1);
spew("$dir/secret", 'token-cli-test-secret-0123456789');
my @secret = ('--secret-file', "$dir/secret");

sub tool { return run_cmd([$cli, @_]) }

###############################################################################
# --help, a bad option, --version

{
    my ($rc, $out, $err) = tool('--help');
    is($rc, 0, '--help: exit 0');
    like($out, qr/\Ausage: smcp-token --sub TENANT/, '... the usage on stdout');
    like($out, qr/^  --ttl +lifetime: 30d, 12h, 90m, 3600s/m, '... which tells --ttl\'s units');
    is($err, '', '... nothing on stderr');

    my ($rc2, $out2) = tool('-h');
    is("$rc2 $out2", "0 $out", '-h: the same');

    ($rc, $out, $err) = tool('--sub', 'alice', '--help');
    is("$rc $out", "0 $out2", '--help after other options: the same');
}

for my $bad ([ '--bogus', '--bogus', 'x' ], [ '-x', '--sub', 'alice', '-x' ],
             [ 'alice', 'alice' ]) {
    my ($name, @args) = @$bad;
    my ($rc, $out, $err) = tool(@args, @secret);
    is($rc, 2, "a bad option (@args): exit 2");
    is($out, '', '... nothing on stdout');
    like($err, qr/\Asmcp-token: unknown option "\Q$name\E"\nusage: smcp-token /,
         '... the option named, then the usage on stderr');
}

{
    my ($rc, $out, $err) = tool('--sub', 'alice', '--ttl');
    is($rc, 2, 'an option without its value: exit 2');
    is($err, "smcp-token: --ttl needs a value\n", '... said so');

    ($rc, $out, $err) = tool(@secret);
    is($rc, 2, 'no --sub: exit 2');
    like($err, qr/^smcp-token: --sub \(the tenant\) or --revoke is required\nusage: /,
         '... said so, with the usage');

    my $v = smcp_version();
    ($rc, $out, $err) = tool('--version');
    is("$rc $out$err", "0 smcp-token $v\n", "--version: \"smcp-token $v\", exit 0");
}

###############################################################################
# minting: the token alone on stdout, its jti and expiry on stderr

# mint(--ttl value) -> (exit code, stdout, stderr, claims)
sub mint {
    my (@args) = @_;
    my ($rc, $out, $err) = tool('--sub', 'alice', @secret, @args);
    my ($tok) = $out =~ /\A([\w-]+\.[\w-]+\.[\w-]+)\n\z/;
    my (undef, $cl) = $tok ? SMCP::Test::decode_jwt($tok) : (undef, {});
    return ($rc, $out, $err, $cl // {});
}

{
    my ($rc, $out, $err, $cl) = mint();
    is($rc, 0, 'mints: exit 0');
    like($out, qr/\A[\w-]+\.[\w-]+\.[\w-]+\n\z/, '... stdout: the token alone, one line');
    my ($jti, $exp) = $err =~ /\Ajti: ([0-9a-f]{32})\nexpires: (\S+)\n\z/;
    is($jti, $cl->{jti}, '... stderr: its jti') or diag($err);
    like($exp // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, '... and its expiry, ISO-8601 UTC');
    is(iso2epoch($exp // ''), $cl->{exp}, "... the token's exp ($exp)");
    is($cl->{exp} - $cl->{iat}, 30 * 86400, '... 30 days by default');
}

# --ttl: durations with a unit, plain seconds; the lifetime is exp - iat
for my $c ([ '30d', 30 * 86400 ], [ '12h', 12 * 3600 ], [ '90m', 90 * 60 ],
           [ '3600s', 3600 ], [ '3600', 3600 ], [ '1', 1 ],
           [ '3650d', 3650 * 86400 ]) {
    my ($ttl, $want) = @$c;
    my ($rc, $out, $err, $cl) = mint('--ttl', $ttl);
    is($rc, 0, "--ttl $ttl: exit 0") or diag($err);
    is(($cl->{exp} // 0) - ($cl->{iat} // 0), $want, "... lives $want s");
}

# anything else is refused, naming the option, and mints nothing
for my $ttl ('0', '0d', '-5', '+5', ' 5', 'abc', '30x', '30dd', '1.5h', 'd', '5 d',
             '30D', '') {
    my ($rc, $out, $err) = mint('--ttl', $ttl);
    is($rc, 2, "--ttl '$ttl' refused: exit 2");
    is($out, '', '... no token');
    is($err, "smcp-token: --ttl: \"$ttl\" is not a duration (a number of seconds, "
             . "or with a unit: 3600s, 90m, 12h, 30d)\n", '... said so');
}
for my $ttl ('3651d', '87601h', '315360001', '99999999999999999999d',
             '9223372036854775807s') {
    my ($rc, $out, $err) = mint('--ttl', $ttl);
    is("$rc $out", '2 ', "--ttl $ttl: too long, refused");
    is($err, "smcp-token: --ttl: \"$ttl\" is longer than 3650d\n", '... said so');
}

done_testing();
