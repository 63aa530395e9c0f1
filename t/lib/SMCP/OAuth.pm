package SMCP::OAuth;

# The client half of the module's OAuth 2.1 authorization server, for
# tests: PKCE, dynamic registration, the sign-in page (its CSRF cookie and
# form), the authorization code and the token endpoint, through an
# SMCP::Test instance's raw HTTP.
#
#   my $o = SMCP::OAuth->new($t);
#   my $c = $o->register;                 # {client_id, redirect_uris ...}
#   my $tok = $o->sign_in($c, key => $t->token);   # the whole code flow
#   $o->token(grant_type => 'refresh_token', ...)  # -> response

use strict;
use warnings;

use Digest::SHA qw(sha256);
use SMCP::Test qw(json_encode json_decode b64url rhex);

sub new {
    my ($class, $t, %o) = @_;
    return bless { t => $t, redirect => 'http://127.0.0.1:9/callback', %o },
                 $class;
}

# client_metadata_conf($port): the server{} lines that fetch client ID
# metadata documents (sandbox_mcp_oauth_client_metadata_location and its
# internal location), an https URL's path mapped onto 127.0.0.1:$port (a
# fake: SMCP::Fakes::start_static)
sub client_metadata_conf {
    my ($port) = @_;
    return qq{
        sandbox_mcp_oauth_client_metadata_location /_smcp_client_metadata;
        location = /_smcp_client_metadata {
            internal;
            proxy_pass_request_headers off;
            proxy_pass_request_body off;
            proxy_method GET;
            subrequest_output_buffer_size 8k;
            set \$cm_path "/";
            if (\$arg_url ~ "^https://[^/]+(/.*)\$") { set \$cm_path \$1; }
            proxy_pass http://127.0.0.1:$port\$cm_path;
        }};
}

sub t { $_[0]{t} }
sub issuer { 'http://127.0.0.1:' . $_[0]{t}->port }
sub resource { $_[0]->issuer . '/mcp' }

sub esc {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9\-._~])/sprintf('%%%02X', ord($1))/ge;
    return $s;
}

sub form {
    my (@kv) = @_;
    my @p;
    while (my ($k, $v) = splice(@kv, 0, 2)) {
        push @p, esc($k) . '=' . esc($v) if defined $v;
    }
    return join '&', @p;
}

sub unesc {
    my ($s) = @_;
    $s =~ tr/+/ /;
    $s =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;
    return $s;
}

# the query of a URL as a hash
sub query {
    my ($url) = @_;
    my ($q) = ($url // '') =~ /\?(.*)$/;
    return { map { my ($k, $v) = split /=/, $_, 2; (unesc($k), unesc($v // '')) }
             split /&/, $q // '' };
}

# (verifier, S256 challenge)
sub pkce {
    my $v = rhex(32);
    return ($v, b64url(sha256($v)));
}

sub get {
    my ($self, $path, %o) = @_;
    return $self->{t}->http(method => 'GET', path => $path, %o);
}

# POST a form (or JSON with json => ref)
sub post {
    my ($self, $path, $body, %o) = @_;
    my @h = @{ $o{headers} || [] };
    my $ct = ref $body ? 'application/json' : 'application/x-www-form-urlencoded';
    $body = json_encode($body) if ref $body;
    my $r = $self->{t}->http(method => 'POST', path => $path, body => $body,
                             headers => [ 'Content-Type' => $ct, @h ]);
    $r->{json} = json_decode($r->{body}) if ($r->{headers}{'content-type'} // '') =~ /json/;
    return $r;
}

sub register {
    my ($self, %md) = @_;
    my $r = $self->post('/oauth/register', {
        client_name => 'Test client', redirect_uris => [ $self->{redirect} ],
        token_endpoint_auth_method => 'none', %md });
    return wantarray ? ($r->{json}, $r) : $r->{json};
}

# the authorization request's parameters (%o overrides; undef drops)
sub auth_params {
    my ($self, $client, %o) = @_;
    my %p = (response_type => 'code', client_id => $client->{client_id},
             redirect_uri => $self->{redirect}, code_challenge => $o{challenge},
             code_challenge_method => 'S256', state => 'st-' . rhex(4),
             resource => $self->resource, scope => 'mcp');
    delete $o{challenge};
    %p = (%p, %o);
    return map { defined $p{$_} ? ($_ => $p{$_}) : () } sort keys %p;
}

# GET /oauth/authorize: the page, its cookie and the form's csrf
sub authorize_page {
    my ($self, @params) = @_;
    my $r = $self->get('/oauth/authorize?' . form(@params));
    my ($cookie) = grep { /^smcp_oauth_csrf=/ } map { $_->[1] }
                   grep { lc $_->[0] eq 'set-cookie' } @{ $r->{header_list} || [] };
    ($r->{cookie}) = ($cookie // '') =~ /^(smcp_oauth_csrf=[0-9a-f]+)/;
    ($r->{csrf}) = $r->{body} =~ /name="csrf" value="([^"]*)"/;
    return $r;
}

# POST the sign-in form: %o key, action, csrf, cookie, origin, extra => []
sub consent {
    my ($self, $page, $params, %o) = @_;
    my @h;
    push @h, Cookie => exists $o{cookie} ? $o{cookie} : $page->{cookie};
    push @h, Origin => $o{origin} if $o{origin};
    return $self->post('/oauth/authorize', form(@$params,
                       csrf => exists $o{csrf} ? $o{csrf} : $page->{csrf},
                       access_key => $o{key}, action => $o{action} // 'approve',
                       @{ $o{extra} || [] }), headers => \@h);
}

sub token {
    my ($self, @kv) = @_;
    return $self->post('/oauth/token', form(@kv));
}

# the whole code flow: (tokens, code, verifier, params)
sub sign_in {
    my ($self, $client, %o) = @_;
    my ($v, $c) = pkce();
    my @p = $self->auth_params($client, challenge => $c);
    my $page = $self->authorize_page(@p);
    my $r = $self->consent($page, \@p, key => $o{key});
    my $q = query($r->{headers}{location});
    my $tr = $self->token(grant_type => 'authorization_code', code => $q->{code},
                          redirect_uri => $self->{redirect},
                          client_id => $client->{client_id}, code_verifier => $v,
                          resource => $self->resource);
    return ($tr->{json}, $q->{code}, $v, \@p);
}

1;
