#!/usr/bin/env perl
# runner/redis/smcp-sentinel-master (the Redis image's question to the
# sentinels, for smcp-redis-start and smcp-sentinel-start) against
# sentinels that lie: fakes on loopback that answer `SENTINEL
# get-master-addr-by-name` with a host name, a shell command, the
# any-address, a port out of range, three elements, an error, a megabyte,
# NUL bytes.  Nothing of such an answer is printed (it would reach
# redis-server's command line or a sentinel's configuration); a lying
# sentinel is passed over for the next one, whose address is taken; none
# answering prints nothing.  Needs redis-cli (redis-tools, with
# redis-server).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Socket::INET;
use Test::More;

use SMCP::Docker qw(fork_child stop_child);
use SMCP::Test qw(repo_root run_cmd prereq_fail which_bin free_port);

prereq_fail('redis-cli missing (apt-get install redis-tools; .ci/install-deps)')
    unless which_bin('redis-cli');
my $script = repo_root() . '/runner/redis/smcp-sentinel-master';

my @kids;

# a fake sentinel: every command gets REPLY (RESP, as it is); -> port
sub fake {
    my ($reply) = @_;
    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 16, ReuseAddr => 1)
        or die "listen: $!\n";
    push @kids, fork_child(sub {
        while (my $c = $l->accept) {
            while (sysread($c, my $buf, 65536)) {
                print $c $reply;
            }
            close $c;
        }
    });
    my $port = $l->sockport;
    close $l;
    return $port;
}

sub bulk { return '$' . length($_[0]) . "\r\n$_[0]\r\n" }
sub arr { return '*' . scalar(@_) . "\r\n" . join('', map { bulk($_) } @_) }

sub ask {
    my (@ports) = @_;
    local $ENV{SMCP_SENTINELS} = join ',', map { "127.0.0.1:$_" } @ports;
    my ($rc, $out, $err) = run_cmd([$script], timeout => 30);
    return ($rc, $out);
}

my $good = fake(arr('10.1.2.3', '6379'));
my ($rc, $out) = ask($good);
is($rc, 0, 'exit 0');
is($out, "10.1.2.3 6379 127.0.0.1:$good\n", 'a sentinel\'s answer: address, port, sentinel');
($rc, $out) = ask(fake(arr('fd00::7', '6380')));
like($out, qr/^fd00::7 6380 /, 'an IPv6 address');

my %lies = (
    'a host name'            => arr('bad.cafe', '6379'),
    'a name of letters'      => arr('evil.example', '6379'),
    'a shell command'        => arr('1.2.3.4;touch /tmp/x', '6379'),
    'a substitution'         => arr('$(id)', '6379'),
    'a glob'                 => arr('*', '6379'),
    'the any-address'        => arr('0.0.0.0', '6379'),
    'the IPv6 any-address'   => arr('::', '6379'),
    'port 0'                 => arr('10.1.2.3', '0'),
    'port 65536'             => arr('10.1.2.3', '65536'),
    'a port of letters'      => arr('10.1.2.3', 'x'),
    'a negative port'        => arr('10.1.2.3', '-1'),
    'three elements'         => arr('10.1.2.3', '6379', 'more'),
    'a space in the address' => arr('10.1.2.3 6379', '1'),
    'an error'               => "-ERR no such master\r\n",
    'nil'                    => "*-1\r\n",
    'a megabyte'             => arr('1' x 1_048_576, '6379'),
    'NUL bytes'              => arr("10.1.2.3\0; id", "6379"),
);
for my $what (sort keys %lies) {
    my $liar = fake($lies{$what});
    ($rc, $out) = ask($liar);
    is($out, '', "$what: nothing printed");
    ($rc, $out) = ask($liar, $good);
    is($out, "10.1.2.3 6379 127.0.0.1:$good\n", "... and the next sentinel's answer taken");
}

($rc, $out) = ask(free_port(), free_port());
is("$rc $out", '0 ', 'no sentinel answering: nothing, exit 0');

stop_child($_) for @kids;
done_testing;
