package SMCP::UI;

# Helpers for the dashboard's tests (sandbox_mcp_ui), core Perl only:
# the files of ngx_sandbox_mcp_module/ui/ as the server must serve them
# (pages laid out by build/smcp-embed, which `make` builds),
# and an event-stream client on a raw socket (many at once, read without
# blocking).
#
#   my $ui = SMCP::UI->new($t);
#   $ui->file('run.html'); $ui->pages; $ui->assets;
#   $ui->type('static/app.css');
#   my $s = $ui->sse("/ui/runs/$id/events", cookie => $c, last_id => $x);
#                                      # raw => 1: data not decoded (bench)
#   $s->status; $s->headers;           # once the head came
#   $s->pump(2);                       # read what came, up to 2 s
#   $s->events;                        # [{id, event, data, json}, ...]
#   $s->comments; $s->closed; $s->close;

use strict;
use warnings;

use IO::Select;
use IO::Socket::INET;
use Errno qw(EAGAIN EINTR);
use Time::HiRes qw(time);

use SMCP::Test;

my %TYPES = (
    html  => 'text/html; charset=utf-8',
    css   => 'text/css; charset=utf-8',
    js    => 'text/javascript; charset=utf-8',
    json  => 'application/json',
    svg   => 'image/svg+xml',
    png   => 'image/png',
    ico   => 'image/x-icon',
    webp  => 'image/webp',
    txt   => 'text/plain; charset=utf-8',
    woff2 => 'font/woff2',
);

sub new {
    my ($class, $t) = @_;
    return bless { t => $t, dir => SMCP::Test::repo_root() . '/ngx_sandbox_mcp_module/ui' },
                 $class;
}

# the bytes of ui/NAME as served: a page laid out on its ui/layouts/ by the
# build's smcp-embed (the generator that embeds it), any other file as it is
sub file {
    my ($self, $name) = @_;
    my $fh;
    if ($name =~ /^[^\/]+\.html$/) {
        my $embed = SMCP::Test::repo_root() . '/build/smcp-embed';
        open $fh, '-|:raw', $embed, 'page', "$self->{dir}/$name" or return undef;
    } else {
        open $fh, '<:raw', "$self->{dir}/$name" or return undef;
    }
    local $/;
    my $bytes = <$fh>;
    close $fh or return undef;
    return $bytes;
}

# NAME of every page (ui/NAME.html)
sub pages {
    my ($self) = @_;
    opendir my $d, $self->{dir} or return ();
    return sort grep { /^[a-z0-9][a-z0-9_.-]*\.html$/ && -f "$self->{dir}/$_" } readdir $d;
}

# static/NAME of every asset
sub assets {
    my ($self) = @_;
    opendir my $d, "$self->{dir}/static" or return ();
    return map { "static/$_" } sort grep { !/^\./ && -f "$self->{dir}/static/$_" } readdir $d;
}

sub type {
    my ($self, $name) = @_;
    my ($ext) = $name =~ /\.([a-z0-9]+)$/;
    return $TYPES{ $ext // '' };
}

# an event stream: GET path (HTTP/1.1, chunked), read as it comes
sub sse {
    my ($self, $path, %o) = @_;
    my $port = $o{port} // $self->{t}{port};
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or return SMCP::UI::Stream->new(undef, "connect: $!");
    my $st;
    binmode $s;
    $s->autoflush(1);
    $s->blocking(0);
    my $req = "GET $path HTTP/1.1\r\nHost: 127.0.0.1:$port\r\n"
            . "Accept: text/event-stream\r\n";
    $req .= "Cookie: $o{cookie}\r\n" if defined $o{cookie};
    $req .= "Last-Event-ID: $o{last_id}\r\n" if defined $o{last_id};
    $req .= "$_\r\n" for @{ $o{headers} || [] };
    $req .= "\r\n";
    my $off = 0;
    my $sel = IO::Select->new($s);
    while ($off < length $req) {
        $sel->can_write(5) or last;
        my $n = syswrite($s, $req, length($req) - $off, $off);
        $off += $n if $n;
    }
    $st = SMCP::UI::Stream->new($s);
    $st->{raw} = $o{raw};
    return $st;
}

# pump(\@streams, $seconds, sub { done? }): read every stream until done
# or the time is up
sub pump_all {
    my ($streams, $secs, $done) = @_;
    my $end = time() + $secs;
    my $sel = IO::Select->new(grep { defined } map { $_->{sock} } @$streams);
    my %by = map { (defined $_->{sock} ? (fileno($_->{sock}) => $_) : ()) } @$streams;
    while (time() < $end) {
        last if $done && $done->();
        last unless $sel->count;
        for my $fh ($sel->can_read(0.2)) {
            my $st = $by{ fileno $fh };
            $st->_read;
            $sel->remove($fh) if $st->{closed};
        }
    }
    return $done ? $done->() : 1;
}

package SMCP::UI::Stream;

use strict;
use warnings;

use IO::Select;
use Errno qw(EAGAIN EINTR);
use Time::HiRes qw(time);

sub new {
    my ($class, $sock, $err) = @_;
    return bless { sock => $sock, error => $err, buf => '', body => '',
                   events => [], comments => 0, closed => !$sock,
                   head => undef, times => [] }, $class;
}

sub status   { $_[0]{status} // 0 }
sub headers  { $_[0]{headers} // {} }
sub events   { $_[0]{events} }
sub comments { $_[0]{comments} }
sub closed   { $_[0]{closed} }
sub ended    { $_[0]{last_chunk} }
sub body     { $_[0]{body} }

sub close {
    my ($self) = @_;
    close $self->{sock} if $self->{sock};
    $self->{sock} = undef;
    $self->{closed} = 1;
}

# read up to $secs, or until $done->($self)
sub pump {
    my ($self, $secs, $done) = @_;
    my $end = time() + ($secs // 1);
    return 0 unless $self->{sock};
    my $sel = IO::Select->new($self->{sock});
    while (time() < $end && !$self->{closed}) {
        return 1 if $done && $done->($self);
        $self->_read if $sel->can_read(0.1);
    }
    return $done ? ($done->($self) ? 1 : 0) : 1;
}

sub _read {
    my ($self) = @_;
    my $n = sysread($self->{sock}, my $data, 262144);
    if (!defined $n) {
        return if $! == EAGAIN || $! == EINTR;
        $self->{closed} = 1;
        return;
    }
    if ($n == 0) {
        $self->{closed} = 1;
        return;
    }
    $self->{buf} .= $data;
    $self->_parse;
}

sub _parse {
    my ($self) = @_;
    if (!defined $self->{head}) {
        my $i = index($self->{buf}, "\r\n\r\n");
        return if $i < 0;
        $self->{head} = substr($self->{buf}, 0, $i);
        $self->{buf} = substr($self->{buf}, $i + 4);
        my @l = split /\r\n/, $self->{head};
        ($self->{status}) = (shift(@l) // '') =~ m{^HTTP/\S+ (\d+)};
        for (@l) {
            my ($k, $v) = /^([^:]+):\s*(.*)$/ or next;
            $self->{headers}{ lc $k } = $v;
        }
        $self->{chunked} = ($self->{headers}{'transfer-encoding'} // '') =~ /chunked/i;
    }
    if ($self->{chunked}) {
        while ($self->{buf} =~ /^([0-9a-fA-F]+)[^\r\n]*\r\n/) {
            my $n = hex $1;
            my $hl = length($&);
            if ($n == 0) {
                $self->{last_chunk} = 1;
                $self->{buf} = '';
                last;
            }
            last if length($self->{buf}) < $hl + $n + 2;
            $self->{body} .= substr($self->{buf}, $hl, $n);
            $self->{pending} .= substr($self->{buf}, $hl, $n);
            $self->{buf} = substr($self->{buf}, $hl + $n + 2);
        }
    } else {
        $self->{body} .= $self->{buf};
        $self->{pending} .= $self->{buf};
        $self->{buf} = '';
    }
    $self->_events;
}

sub _events {
    my ($self) = @_;
    $self->{pending} //= '';
    while ($self->{pending} =~ s/^(.*?)\n\n//s) {
        my $block = $1;
        my %e;
        for my $line (split /\n/, $block) {
            if ($line =~ /^:/) { $self->{comments}++; next }
            my ($k, $v) = $line =~ /^([^:]+): ?(.*)$/ or next;
            $e{$k} = exists $e{$k} && $k eq 'data' ? "$e{$k}\n$v" : $v;
        }
        next unless exists $e{data} || exists $e{event};
        $e{at} = time();
        $e{json} = SMCP::Test::json_decode($e{data} // '') unless $self->{raw};
        push @{ $self->{events} }, \%e;
    }
}

1;
