package SMCP::Sentinel;

# Redis Sentinel around a test's Redis (SMCP::Test's redis-server, the
# master): one replica and three sentinels (redis-server --sentinel, the
# engine of Debian's redis-sentinel), all on 127.0.0.1, each in its own
# directory of the test's, started with $t->spawn (stopped with the test).
#
#   my $sen = SMCP::Sentinel->new(t => $t);   # after $t->start_redis
#   $sen->addr            # sentinel://127.0.0.1:P1,...,127.0.0.1:P3/smcp
#   $sen->master_port     # where the sentinels say the master is now
#   $sen->wait_master(not => $port, timeout => 60)  # a failover's new port
#   $sen->wait_replicas($port, 1, 60)  # the master at $port has N replicas
#                                      # online and in sync
#   $sen->restart($port)  # redis-server again on a port it had (the
#                         # sentinels make it a replica of the master)
#   $sen->wait_replica_known($port, 60)  # every sentinel sees it as a
#                         # healthy replica (one a failover may pick)
#   $sen->failover        # SENTINEL FAILOVER: the master turned replica,
#                         # without dying
#
# Sentinels judge a master down after 1 s (down-after-milliseconds), with
# a quorum of two.

use strict;
use warnings;

use File::Path qw(make_path);
use Time::HiRes qw(time);

use SMCP::Test qw(wait_until);

my $NAME = 'smcp';

sub new {
    my ($class, %o) = @_;
    my $t = $o{t};
    my $self = bless { t => $t, name => $o{name} // $NAME, ports => {},
                       pids => {}, sentinels => [] }, $class;
    my $master = $t->redis_port;
    my $mconf = $t->dir . '/redis/redis.conf';
    $self->{ports}{$master} = $mconf;

    # the replica: the master's settings, its own port and directory
    my $rport = $t->free_port;
    my $rdir = $t->dir . "/redis-$rport";
    make_path($rdir);
    (my $conf = SMCP::Test::slurp($mconf)) =~ s/^(port|dir|logfile|unixsocket) .*\n//mg;
    SMCP::Test::_write_file("$rdir/redis.conf", $conf . <<"EOF");
port $rport
dir $rdir
logfile $rdir/redis.log
replicaof 127.0.0.1 $master
EOF
    $self->{ports}{$rport} = "$rdir/redis.conf";
    $self->_redis($rport);

    for (1 .. 3) {
        my $port = $t->free_port;
        my $dir = $t->dir . "/sentinel-$port";
        make_path($dir);
        SMCP::Test::_write_file("$dir/sentinel.conf", <<"EOF");
port $port
bind 127.0.0.1
daemonize no
dir $dir
logfile $dir/sentinel.log
sentinel monitor $self->{name} 127.0.0.1 $master 2
sentinel down-after-milliseconds $self->{name} 1000
sentinel failover-timeout $self->{name} 10000
sentinel parallel-syncs $self->{name} 1
EOF
        $t->spawn("sentinel $port", "$dir/stdout.log", $t->{redis_bin},
                  "$dir/sentinel.conf", '--sentinel');
        push @{ $self->{sentinels} }, $port;
    }

    # up when each sentinel knows the master, its replica and the others
    my $ok = wait_until(60, sub {
        for my $p (@{ $self->{sentinels} }) {
            my $m = eval { $self->sentinel($p, 'SENTINEL', 'MASTER', $self->{name}) };
            return 0 unless ref $m eq 'ARRAY';
            my %m = @$m;
            return 0 unless ($m{'num-slaves'} // 0) >= 1
                         && ($m{'num-other-sentinels'} // 0) >= 2;
        }
        return 1;
    }, 0.2);
    die "the sentinels did not see the master, its replica and each other: "
        . $self->_views . "\n" unless $ok;
    $self->wait_replicas($master, 1, 60)
        or die "the replica did not sync with the master\n";
    return $self;
}

# what each sentinel says of the master, in a line (a failure's message)
sub _views {
    my ($self) = @_;
    my @v;
    for my $p (@{ $self->{sentinels} }) {
        my $m = eval { $self->sentinel($p, 'SENTINEL', 'MASTER', $self->{name}) };
        if (ref $m eq 'ARRAY') {
            my %m = @$m;
            push @v, "$p: " . join(' ', map { "$_=" . ($m{$_} // '?') }
                                   qw(flags num-slaves num-other-sentinels));
        } else {
            (my $e = $@ || 'no answer') =~ s/\s+$//;
            push @v, "$p: $e";
        }
    }
    return join('; ', @v);
}

sub addr {
    my ($self) = @_;
    return 'sentinel://' . join(',', map { "127.0.0.1:$_" } @{ $self->{sentinels} })
           . "/$self->{name}";
}

sub sentinels { return @{ $_[0]{sentinels} } }

# one command to a server on 127.0.0.1:$port (a new connection)
sub sentinel {
    my ($self, $port, @cmd) = @_;
    my $c = SMCP::Test::Redis->new(port => $port, timeout => 3);
    return $c->cmd(@cmd);
}

# where the sentinels (the first that answers) say the master is
sub master_port {
    my ($self) = @_;
    for my $p (@{ $self->{sentinels} }) {
        my $r = eval { $self->sentinel($p, 'SENTINEL', 'get-master-addr-by-name',
                                       $self->{name}) };
        return $r->[1] if ref $r eq 'ARRAY' && @$r == 2;
    }
    return undef;
}

# the new master's port once every sentinel names another than $o{not}
sub wait_master {
    my ($self, %o) = @_;
    my $new;
    wait_until($o{timeout} // 60, sub {
        my %seen;
        for my $p (@{ $self->{sentinels} }) {
            my $r = eval { $self->sentinel($p, 'SENTINEL', 'get-master-addr-by-name',
                                           $self->{name}) };
            return 0 unless ref $r eq 'ARRAY' && @$r == 2 && $r->[1] != $o{not};
            $seen{ $r->[1] } = 1;
        }
        return 0 unless keys %seen == 1;
        ($new) = keys %seen;
        my $role = eval { $self->sentinel($new, 'ROLE') };
        return ref $role eq 'ARRAY' && $role->[0] eq 'master';
    }, 0.1);
    return $new;
}

# the master at $port has $n replicas online, at its replication offset
sub wait_replicas {
    my ($self, $port, $n, $timeout) = @_;
    return wait_until($timeout // 60, sub {
        my $info = eval { $self->sentinel($port, 'INFO', 'replication') } // '';
        my ($off) = $info =~ /^master_repl_offset:(\d+)/m;
        my @up = $info =~ /^slave\d+:.*state=online,offset=(\d+)/mg;
        return defined $off && (grep { $_ == $off } @up) >= $n;
    }, 0.1);
}

# redis-server on a port it had (its own configuration, as it left it)
sub restart {
    my ($self, $port) = @_;
    $self->_redis($port);
}

sub _redis {
    my ($self, $port) = @_;
    my $t = $self->{t};
    my $conf = $self->{ports}{$port} or die "no Redis was on port $port\n";
    (my $dir = $conf) =~ s{/[^/]+$}{};
    my $pid = $t->spawn("redis $port", "$dir/stdout.log", $t->{redis_bin}, $conf);
    $self->{pids}{$port} = $pid;
    return $pid if wait_until(30, sub {
        defined eval { $self->sentinel($port, 'PING') }
    }, 0.05);
    my @log = grep { defined } (split /\n/, SMCP::Test::slurp("$dir/redis.log")
                                          // SMCP::Test::slurp("$dir/stdout.log")
                                          // '')[-3 .. -1];
    die "redis-server did not start on port $port: " . join(' | ', @log) . "\n";
}

# the redis-server this module started on $port, or the test's master
sub pid {
    my ($self, $port) = @_;
    return $self->{pids}{$port} // ($port == $self->{t}->redis_port
                                    ? $self->{t}{redis_pid} : undef);
}

# every sentinel sees the server on $port as a replica in good health (no
# flag but "slave", its link to the master up): one a failover may pick
sub wait_replica_known {
    my ($self, $port, $timeout) = @_;
    return wait_until($timeout // 60, sub {
        for my $p (@{ $self->{sentinels} }) {
            my $l = eval { $self->sentinel($p, 'SENTINEL', 'REPLICAS', $self->{name}) };
            return 0 unless ref $l eq 'ARRAY';
            my ($r) = grep { my %r = @$_; ($r{port} // 0) == $port } @$l;
            return 0 unless $r;
            my %r = @$r;
            return 0 unless ($r{flags} // '') eq 'slave'
                         && ($r{'master-link-status'} // '') eq 'ok';
        }
        return 1;
    }, 0.2);
}

# SENTINEL FAILOVER (the first sentinel that takes it)
sub failover {
    my ($self) = @_;
    for my $p (@{ $self->{sentinels} }) {
        my $r = eval { $self->sentinel($p, 'SENTINEL', 'FAILOVER', $self->{name}) };
        return 1 if defined $r && $r eq 'OK';
    }
    return 0;
}

1;
