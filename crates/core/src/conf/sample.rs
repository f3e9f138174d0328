//! Sample expressions as plain data: a fetch and its converters (`req.hdr(host),lower`), as
//! ACLs, rule actions, log formats and `use_backend` names use them. Evaluated by
//! `crate::sample`.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

pub use super::patterns::{MapKey, MapOut, Match, Regex};

pub use super::stick::{Counter, TableOp, TableSource};

/// A fetch followed by converters, applied left to right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expr {
    pub fetch: Fetch,
    pub convs: Vec<Conv>,
}

/// Which occurrence of a header a fetch takes: HAProxy's `OCC` argument (positive from the
/// first, negative from the last; absent: the last for `req.hdr`, all for matching).
pub type Occ = Option<i32>;

/// A figure of the kernel's `TCP_INFO` for a connection (HAProxy's `fc_rtt` family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpInfoField {
    /// The smoothed round-trip time, and its variance: in microseconds when `us` is
    /// asked for, else milliseconds.
    Rtt {
        us: bool,
    },
    RttVar {
        us: bool,
    },
    Unacked,
    Sacked,
    Lost,
    Retrans,
    Fackets,
    Reordering,
}

/// Whose TCP-mode payload a fetch reads: the client's (`req.*`, `tcp-request content`
/// rules) or the server's (`res.*`, `tcp-response content` rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadSide {
    Req,
    Res,
}

/// Where a sample comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    // The connection.
    Src,
    SrcPort,
    Dst,
    DstPort,
    // The proxy.
    FeName,
    FeId,
    BeName,
    BeId,
    SrvName,
    SrvId,
    FeConn(Option<NameRef>),
    BeConn(Option<NameRef>),
    NbSrv(Option<NameRef>),
    Connslots(Option<NameRef>),
    Queue(Option<NameRef>),
    AvgQueue(Option<NameRef>),
    // The request.
    Method,
    Path,
    PathQ,
    Query,
    Url,
    UrlParam(String),
    Base,
    /// A header's values split at commas (`req.hdr`).
    ReqHdr(String, Occ),
    /// `hdr`: the request's header in request rules, the response's in response rules,
    /// as HAProxy reads it.
    Hdr(String, Occ),
    /// The header's values (split on commas) or, when false, its lines.
    ReqHdrCnt(String, bool),
    /// A header's whole lines (`req.fhdr`).
    ReqFhdr(String, Occ),
    ReqCook(String),
    ReqCookCnt(String),
    /// `res.cook(NAME)`: a cookie the response sets (`Set-Cookie`).
    ResCook(String),
    ResCookCnt(String),
    ReqBody,
    /// `req.len`: the request body's length; in TCP mode, the bytes inspected so far;
    /// `res.len`: the bytes of the server's payload inspected so far (TCP mode).
    PayloadLen(PayloadSide),
    /// `req.payload(OFFSET,LENGTH)`, `res.payload(...)`: bytes of a TCP-mode payload.
    Payload(PayloadSide, usize, usize),
    /// `req.payload_lv(OFFSET1,LENGTH[,OFFSET2])`, `res.payload_lv(...)`: a block whose size
    /// is the big-endian number of LENGTH bytes at OFFSET1, starting at OFFSET2 (absolute,
    /// or relative to the end of the size with a sign) or right after the size.
    PayloadLv {
        side: PayloadSide,
        size_at: usize,
        size_len: usize,
        start: Option<(bool, i64)>,
    },
    /// `req.ssl_hello_type`, `req.ssl_ver`, `req.ssl_sni`, `req.ssl_alpn`,
    /// `req.ssl_ec_ext`, `req.ssl_st_ext`: a TLS ClientHello in a TCP-mode payload.
    ReqSslHelloType,
    ReqSslVer,
    ReqSslSni,
    ReqSslAlpn,
    ReqSslEcExt,
    ReqSslStExt,
    /// `http_auth(L)`: the request's basic credentials are right for userlist L;
    /// `http_auth_group(L)`: their user's name, and (for ACLs, which match any value) the
    /// groups it is in; `http_auth_type`, `http_auth_user`, `http_auth_pass`: the
    /// `Authorization` header's scheme and credentials as sent.
    HttpAuth(NameRef),
    HttpAuthGroup(NameRef),
    HttpAuthType,
    HttpAuthUser,
    HttpAuthPass,
    /// `src_is_local`, `dst_is_local`: the address is one of this host's.
    SrcIsLocal,
    DstIsLocal,
    /// `stopping`: the process is stopping softly; `hostname`: the host's name.
    Stopping,
    /// `res.cache_hit`: the response was served from a cache.
    ResCacheHit,
    /// `res.cache_name`: the cache that served the response.
    ResCacheName,
    Hostname,
    /// `fc_http_major`: the client connection's HTTP major version (1 or 2).
    FcHttpMajor,
    /// `fc_rtt`, `fc_rttvar`, `fc_unacked`, ...: what the kernel knows of the client's TCP
    /// connection (`TCP_INFO`).
    TcpInfo(TcpInfoField),
    /// `be_server_timeout`, `be_tunnel_timeout`: the backend's, in milliseconds.
    BeServerTimeout,
    BeTunnelTimeout,
    /// `cur_server_timeout`, `cur_tunnel_timeout`: what a `set-timeout` rule set for this
    /// transaction, in milliseconds (0 when none did, as HAProxy answers during the rules).
    CurServerTimeout,
    CurTunnelTimeout,
    /// `uuid([4])`: a random (version 4) UUID.
    Uuid,
    /// `base32`, `url32`: the 32-bit hash of Host and path (or the whole target), as
    /// HAProxy's (sdbm then its avalanche); `base32+src`: that hash, then the client's
    /// address, as binary.
    Base32,
    Url32,
    Base32Src,
    /// `capture.req.method`, `capture.req.uri`, `capture.req.ver`: the request line's parts
    /// as received (the version as `HTTP/1.1`).
    CaptureReqMethod,
    CaptureReqUri,
    CaptureReqVer,
    /// `req.body_len`, `req.body_size`: the body buffered so far, the body announced
    /// (Content-Length); `req.body_param(NAME)`: a form field of the buffered body.
    ReqBodyLen,
    ReqBodySize,
    ReqBodyParam(String),
    /// `req.cook_val(NAME)`, `cook_val`: the cookie's value as an integer.
    ReqCookVal(String),
    /// `req.hdr_ip(NAME[,OCC])`, `hdr_ip`: the header's value as an address (a port after an
    /// IPv4 address is left out).
    ReqHdrIp(String, Occ),
    /// `http_auth_bearer([HEADER])`: the token of a `Bearer` authorization.
    HttpAuthBearer(Option<String>),
    /// `res.body`, `res.body_len`, `res.body_size`: the response body as far as an
    /// `http-response wait-for-body` rule buffered it, its length, the length announced.
    ResBody,
    ResBodyLen,
    ResBodySize,
    /// `fe_req_rate([FE])`, `fe_sess_rate([FE])`, `be_sess_rate([BE])`: per second, over
    /// the last second.
    FeReqRate(Option<NameRef>),
    FeSessRate(Option<NameRef>),
    BeSessRate(Option<NameRef>),
    /// `srv_is_up(BE/SRV)`, `srv_conn(BE/SRV)`, `srv_sess_rate(BE/SRV)`: a server's
    /// state, its connections and its sessions per second.
    SrvIsUp(NameRef, NameRef),
    SrvConn(NameRef, NameRef),
    SrvSessRate(NameRef, NameRef),
    /// `http_first_req`: the request is its connection's first.
    HttpFirstReq,
    /// `capture.req.hdr(N)`, `capture.res.hdr(N)`: what capture slot N of that side holds.
    Captured {
        response: bool,
        slot: usize,
    },
    /// `last_rule_file`, `last_rule_line`: where the last final rule that applied was
    /// written.
    LastRuleFile,
    LastRuleLine,
    /// `thread`: the worker serving the connection, from 0.
    Thread,
    /// `so_id`, `so_name`: the listener's number in its frontend (from 1) and its `name`.
    SoId,
    SoName,
    /// `fc_pp_authority`, `fc_pp_unique_id`: TLVs of the client's PROXY v2 header.
    FcPpAuthority,
    FcPpUniqueId,
    ReqVer,
    // The response.
    ResHdr(String, Occ),
    ResHdrCnt(String, bool),
    ResFhdr(String, Occ),
    Status,
    ResVer,
    // Variables and the environment.
    Var(VarName),
    Env(String),
    // Constants and others.
    /// `date([OFFSET[,UNIT]])`: now plus `OFFSET`, counted in units of which a second has
    /// this many (1, 1000 or 1000000 for `s`, `ms`, `us`).
    Date(i64, i64),
    Rand(Option<u64>),
    UniqueId,
    /// `ssl_fc`: the client connection is TLS; `ssl_fc_sni`, `ssl_fc_protocol`,
    /// `ssl_fc_cipher`, `ssl_fc_alpn`: its session's facts.
    SslFc,
    SslFcSni,
    SslFcProtocol,
    SslFcCipher,
    SslFcAlpn,
    /// `ssl_fc_*_secret`: a TLS 1.3 secret of the client's session, by its NSS key log
    /// label, as hexadecimal text (`tune.ssl.keylog on`).
    SslFcSecret(&'static str),
    /// `ssl_fc_client_random`, `ssl_fc_session_key` (TLS 1.2's master secret): binary
    /// (`tune.ssl.keylog on`).
    SslFcClientRandom,
    SslFcSessionKey,
    /// `ssl_bc`: the connection to the server is TLS; `ssl_bc_protocol`, `ssl_bc_cipher`,
    /// `ssl_bc_alpn`: its session's facts (once a server answered).
    SslBc,
    SslBcProtocol,
    SslBcCipher,
    SslBcAlpn,
    /// `ssl_fc_cipherlist_*`, `ssl_fc_extlist_bin`, `ssl_fc_eclist_bin`,
    /// `ssl_fc_ecformats_bin`, `ssl_fc_protocol_hello_id`: what the client's ClientHello
    /// offered (`tune.ssl.capture-buffer-size`); `true`: GREASE values left out.
    Hello(HelloPart, bool),
    /// `ssl_c_used`, `ssl_c_verify` (0: verified), `ssl_c_s_dn`, `ssl_c_i_dn`: the client
    /// certificate.
    SslCUsed,
    SslCVerify,
    SslCSubject,
    SslCIssuer,
    /// `ssl_fc_is_resumed`: the client's TLS session was resumed (no full handshake).
    SslFcIsResumed,
    /// `ssl_fc_has_early`: the request came as TLS early data and is served before the
    /// handshake ended (HTTP/3 on an `allow-0rtt` listener).
    SslFcHasEarly,
    /// `ssl_fc_err`, `ssl_c_err`, `ssl_c_ca_err`: the TLS error (of the session, of the
    /// client certificate, of its chain) a connection was let through with: none (0), as
    /// rustls ends every handshake that has one.
    SslErr,
    /// `fc_err`: the error of the client connection: none (0) on one that carries a
    /// request; HAProxy's number in an `error-log-format` line.
    FcErr,
    /// `fc_err_str`: its text (none without an error).
    FcErrStr,
    Bool(bool),
    Int(i64),
    Str(String),
    /// `bin(HEX)`: constant bytes.
    BinConst(Vec<u8>),
    Ip(std::net::IpAddr),
    /// A stick-table counter (`sc0_http_req_rate`, `src_get_gpc0`, `sc_tracked(1)`).
    Table {
        source: TableSource,
        op: TableOp,
        counter: Counter,
        /// `None`: the tracked entry's table (slots) or the current proxy's (`src_*`).
        table: Option<NameRef>,
    },
}

/// A proxy, server, stick table or userlist an expression or a rule names: found by name
/// the first time it is used, its index kept from then on (a configuration generation
/// never changes, and every generation parses its own).
#[derive(Debug, Clone)]
pub struct NameRef {
    pub name: String,
    found: std::sync::OnceLock<Option<usize>>,
}

impl NameRef {
    pub fn new(name: impl Into<String>) -> NameRef {
        NameRef {
            name: name.into(),
            found: std::sync::OnceLock::new(),
        }
    }

    /// Its index among `items`, which `name_of` names (looked up once).
    pub fn index<'a, T: 'a>(
        &self,
        items: impl IntoIterator<Item = &'a T>,
        name_of: impl Fn(&T) -> &str,
    ) -> Option<usize> {
        *self
            .found
            .get_or_init(|| items.into_iter().position(|i| name_of(i) == self.name))
    }
}

impl PartialEq for NameRef {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for NameRef {}

impl std::fmt::Display for NameRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// A variable's name with its scope (`txn.user`), and for a `set-var` the conditions it
/// is set under (`set-var(txn.user,ifnotexists)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VarName {
    pub scope: VarScope,
    pub name: String,
    pub conds: VarConds,
}

/// `set-var` conditions, as HAProxy 2.6 has them (each true, or the variable is not set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VarConds {
    /// `ifexists` / `ifnotexists`: the variable existed before (`proc.` ones always do).
    pub exists: Option<bool>,
    /// `ifempty` / `ifnotempty`: the value is an empty string (a scalar never is).
    pub empty: Option<bool>,
    /// `ifset` / `ifnotset`: the variable holds a value.
    pub set: Option<bool>,
    /// `ifgt` / `iflt`: the variable's integer is greater / less than the value's (when
    /// both are integers; true otherwise).
    pub greater: bool,
    pub less: bool,
}

impl VarConds {
    /// The conditions of `set-var(NAME,COND,...)` after the name.
    pub fn parse(words: &[&str]) -> Result<VarConds, String> {
        let mut c = VarConds::default();
        for w in words {
            match w.trim() {
                "ifexists" => c.exists = Some(true),
                "ifnotexists" => c.exists = Some(false),
                "ifempty" => c.empty = Some(true),
                "ifnotempty" => c.empty = Some(false),
                "ifset" => c.set = Some(true),
                "ifnotset" => c.set = Some(false),
                "ifgt" => c.greater = true,
                "iflt" => c.less = true,
                other => return Err(format!("unknown set-var condition '{other}'")),
            }
        }
        Ok(c)
    }

    /// Whether `value` may replace `current` (`existed`: the variable was there).
    pub fn allow(&self, existed: bool, current: Option<&Sample<'_>>, value: &Sample<'_>) -> bool {
        if self.exists.is_some_and(|want| want != existed)
            || self.set.is_some_and(|want| want != current.is_some())
        {
            return false;
        }
        let text_len = match value {
            Sample::Str(s) | Sample::Bin(s) => Some(s.len()),
            _ => None,
        };
        match (self.empty, text_len) {
            (Some(true), Some(n)) if n > 0 => return false,
            // A scalar is never empty.
            (Some(true), None) => return false,
            (Some(false), Some(0)) => return false,
            _ => {}
        }
        if let (Some(Sample::Int(cur)), Sample::Int(new)) = (current, value) {
            if (self.greater && cur <= new) || (self.less && cur >= new) {
                return false;
            }
        }
        true
    }
}

/// How long a variable lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VarScope {
    /// The whole process.
    Proc,
    /// The client connection.
    Sess,
    /// One request and its response (HAProxy's `req` and `res` scopes live as long here).
    Txn,
    Req,
    Res,
    /// One run of a health check (`http-check|tcp-check set-var(check.x)`); elsewhere it
    /// lives as long as the transaction.
    Check,
}

/// An integer argument of an arithmetic converter: a constant or a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntArg {
    Const(i64),
    Var(VarName),
}

/// What a converter does to a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conv {
    Lower,
    Upper,
    Base64,
    B64Dec,
    Hex,
    /// `hex2i`: hexadecimal digits as a signed integer (0 when they are not).
    Hex2i,
    /// `url_dec([in_form])`: with `in_form`, `+` is a space from the start, else only
    /// after `?`.
    UrlDec(bool),
    Json,
    Length,
    /// `field(N,DELIMS[,COUNT])`: fields are 1-based; a negative N counts from the end.
    Field {
        index: i32,
        delims: Vec<u8>,
        count: u32,
    },
    /// `word(N,DELIMS[,COUNT])`: as field, with runs of delimiters as one.
    Word {
        index: i32,
        delims: Vec<u8>,
        count: u32,
    },
    Regsub {
        re: Regex,
        subst: String,
        global: bool,
    },
    Map(Arc<MapFile>, Option<String>),
    Add(IntArg),
    Sub(IntArg),
    Mul(IntArg),
    Div(IntArg),
    Mod(IntArg),
    And(IntArg),
    Or(IntArg),
    Xor(IntArg),
    Neg,
    Bool,
    Not,
    Odd,
    Even,
    IpMask(std::net::IpAddr, Option<std::net::IpAddr>),
    Crc32(bool),
    Djb2(bool),
    Sdbm(bool),
    Wt6(bool),
    Xxh3(u64),
    /// `crc32c([avalanche])`: the Castagnoli CRC.
    Crc32c(bool),
    /// `xxh32([seed])`, an unsigned 32-bit hash.
    Xxh32(u32),
    /// `xxh64([seed])`, given as a signed integer as HAProxy does.
    Xxh64(u64),
    /// `http_date([offset[,unit]])`: the offset and how many input units make a second.
    HttpDate(i64, i64),
    /// `language(TAGS[,DEFAULT])`: the `;`-separated tags and the answer when none is
    /// accepted.
    Language(Vec<u8>, Option<Vec<u8>>),
    Bytes(usize, Option<usize>),
    Ltime(String, i64),
    Utime(String, i64),
    Concat(String, Option<VarName>, String),
    /// `set-var(NAME)` inside a chain: stores the sample and passes it on.
    SetVar(VarName),
    /// A counter of the input's entry in a table (`table_http_req_rate(T)`).
    Table {
        op: TableOp,
        counter: Counter,
        table: NameRef,
    },
    /// Whether the input has an entry in the table (`in_table(T)`).
    InTable(NameRef),
    /// How many streams track the input's entry (`table_trackers(T)`; 0 without one).
    TableTrackers(NameRef),
    /// `sha1`, `sha2([256|384|512])`, `digest(ALG)`: the input's digest (binary).
    Digest(DigestAlg),
    /// `hmac(ALG,KEY)`: the input's HMAC with a base64 key, given or in a variable.
    Hmac(DigestAlg, KeyArg),
    /// `ub64enc`, `ub64dec`: base64url without padding.
    Ub64Enc,
    Ub64Dec,
    /// `url_enc([query])`: percent-encodes what a query string may not carry as is.
    UrlEnc,
    /// `be2dec(SEP,SIZE[,TRUNC])` and `be2hex([SEP[,SIZE[,TRUNC]]])`: the input read as
    /// big-endian chunks of SIZE bytes, written in decimal or hexadecimal.
    Be2Dec {
        sep: String,
        size: usize,
        truncate: bool,
    },
    Be2Hex {
        sep: String,
        size: usize,
        truncate: bool,
    },
    /// `add_item(DELIM[,VAR[,SUFFIX]])`: the variable's value (and the suffix) appended,
    /// after the delimiter unless the input is empty.
    AddItem(String, Option<VarName>, String),
    /// `iif(TRUE,FALSE)`: one of two strings, as the boolean input says.
    Iif(String, String),
    /// `fix_is_valid`, `fix_tag_value(TAG)` (the tag's number): FIX messages.
    FixIsValid,
    FixTagValue(u32),
    /// `mqtt_is_valid`, `mqtt_field_value(TYPE,FIELD)` (the packet type's number): MQTT
    /// packets.
    MqttIsValid,
    MqttFieldValue(u8, MqttField),
    /// `json_query(PATH[,int])`: the first value at a JSON path of the input: a string,
    /// a boolean, a number (an integer with `int`, else as C's `%g` writes it); nothing
    /// for null, arrays and objects, as in HAProxy.
    JsonQuery {
        path: serde_json_path::JsonPath,
        int: bool,
    },
    /// `jwt_header_query([PATH[,int]])`, `jwt_payload_query(...)`: a JWT's decoded header
    /// (or payload) whole, or the value at a JSON path of it, as `json_query` reads it.
    JwtQuery {
        payload: bool,
        path: Option<serde_json_path::JsonPath>,
        int: bool,
    },
    /// `jwt_verify(ALG,KEY)`: whether a JWT's signature holds (HAProxy's codes).
    JwtVerify {
        alg: StrArg,
        key: JwtKey,
    },
    /// `secure_memcmp(VAR)`: the input equals the variable (compared in constant time);
    /// `strcmp(VAR)`: how it compares with it (the first differing bytes' difference).
    SecureMemcmp(VarName),
    Strcmp(VarName),
}

/// A digest a converter computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestAlg {
    Sha1,
    /// (From the `sha2` crate: ring has no SHA-224.)
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// A string argument given as is, or the variable holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrArg {
    Const(Vec<u8>),
    Var(VarName),
}

/// The JWS algorithms of RFC 7518 `jwt_verify` knows by name (HAProxy refuses other
/// constant names when the configuration is read).
pub const JWT_ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256",
    "PS384", "PS512",
];

/// What `jwt_verify` checks a signature with: an HMAC secret, or a public key (a `PUBLIC
/// KEY` PEM file, as HAProxy 2.6 reads it, or a certificate's), loaded when the
/// configuration is, as HAProxy loads them at start (DER).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtKey {
    Secret(Vec<u8>),
    PublicKey(Vec<u8>),
    Cert(Vec<u8>),
}

/// `hmac`'s key: base64 text, or the variable that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyArg {
    Const(Vec<u8>),
    Var(VarName),
}

/// The fields `mqtt_field_value` names, in HAProxy's order (MQTT 5.0 properties by
/// their number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MqttField {
    Flags,
    ReasonCode,
    ProtocolName,
    ProtocolVersion,
    ClientIdentifier,
    WillTopic,
    WillPayload,
    Username,
    Password,
    Keepalive,
    PayloadFormatIndicator,
    MessageExpiryInterval,
    ContentType,
    ResponseTopic,
    CorrelationData,
    SubscriptionIdentifier,
    SessionExpiryInterval,
    AssignedClientIdentifier,
    ServerKeepalive,
    AuthenticationMethod,
    AuthenticationData,
    RequestProblemInformation,
    DelayInterval,
    RequestResponseInformation,
    ResponseInformation,
    ServerReference,
    ReasonString,
    ReceiveMaximum,
    TopicAliasMaximum,
    TopicAlias,
    MaximumQos,
    RetainAvailable,
    UserProperty,
    MaximumPacketSize,
    WildcardSubscriptionAvailable,
    SubscriptionIdentifiersAvailable,
    SharedSubscriptionAvailable,
}

/// A part of a captured ClientHello, as one of the `ssl_fc_*` fetches gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloPart {
    Ciphers,
    CiphersHex,
    CipherNames,
    CiphersXxh64,
    Version,
    Extensions,
    Groups,
    PointFormats,
}

/// A map converter's file: a pattern list (shared by every user of the file, editable
/// from the CLI) read by `how`: the longest key for `beg` and `ip` (HAProxy's trees), else the first line.
#[derive(Debug, PartialEq, Eq)]
pub struct MapFile {
    pub path: String,
    pub how: Match,
    /// The list and the form compiled for this converter's keys.
    pub list: super::patterns::PatternUse,
    /// `map_regm`: each value is a replacement template (`\N` made `${N}` at load) filled
    /// with the matching key's captures.
    pub substitute: bool,
    /// What the values are (`map_*_int`, `map_*_ip`): checked when the file is read and
    /// the answer typed accordingly.
    pub out: MapOut,
}

/// A typed value.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample<'a> {
    Bool(bool),
    Int(i64),
    Ip(IpAddr),
    Str(Cow<'a, [u8]>),
    Bin(Cow<'a, [u8]>),
}

impl<'a> Sample<'a> {
    pub fn str(s: &'a [u8]) -> Self {
        Sample::Str(Cow::Borrowed(s))
    }

    pub fn string(s: String) -> Self {
        Sample::Str(Cow::Owned(s.into_bytes()))
    }

    pub fn into_owned(self) -> Sample<'static> {
        match self {
            Sample::Bool(b) => Sample::Bool(b),
            Sample::Int(n) => Sample::Int(n),
            Sample::Ip(ip) => Sample::Ip(ip),
            Sample::Str(s) => Sample::Str(Cow::Owned(s.into_owned())),
            Sample::Bin(s) => Sample::Bin(Cow::Owned(s.into_owned())),
        }
    }

    /// As an integer: booleans are 0/1, text is read as a decimal number (a sign, digits;
    /// anything else after them is ignored, nothing before them is accepted).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Sample::Bool(b) => Some(i64::from(*b)),
            Sample::Int(n) => Some(*n),
            Sample::Str(s) | Sample::Bin(s) => leading_int(s),
            Sample::Ip(_) => None,
        }
    }

    /// As a boolean: integers are true when not zero; text is not a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Sample::Bool(b) => Some(*b),
            Sample::Int(n) => Some(*n != 0),
            _ => None,
        }
    }

    pub fn as_ip(&self) -> Option<IpAddr> {
        match self {
            Sample::Ip(ip) => Some(*ip),
            Sample::Str(s) => std::str::from_utf8(s).ok()?.trim().parse().ok(),
            _ => None,
        }
    }

    /// The sample as text (integers in decimal, addresses in their usual form).
    pub fn as_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Sample::Bool(b) => Cow::Borrowed(if *b { b"1" } else { b"0" }),
            Sample::Int(n) => Cow::Owned(n.to_string().into_bytes()),
            Sample::Ip(ip) => Cow::Owned(ip.to_string().into_bytes()),
            Sample::Str(s) | Sample::Bin(s) => Cow::Borrowed(s),
        }
    }

    /// The sample as binary, as HAProxy casts it for what hashes or encodes bytes
    /// (`balance hash`, `crc32`, `hex`, ...): integers and booleans as 8 bytes big-endian,
    /// addresses as their 4 or 16 bytes, text as it is.
    pub fn as_binary(&self) -> Cow<'_, [u8]> {
        match self {
            Sample::Bool(b) => Cow::Owned(u64::from(*b).to_be_bytes().to_vec()),
            Sample::Int(n) => Cow::Owned(n.to_be_bytes().to_vec()),
            Sample::Ip(std::net::IpAddr::V4(a)) => Cow::Owned(a.octets().to_vec()),
            Sample::Ip(std::net::IpAddr::V6(a)) => Cow::Owned(a.octets().to_vec()),
            Sample::Str(s) | Sample::Bin(s) => Cow::Borrowed(s),
        }
    }

    /// Takes the bytes of a text sample, or its text form.
    pub fn into_bytes(self) -> Cow<'a, [u8]> {
        match self {
            Sample::Str(s) | Sample::Bin(s) => s,
            other => Cow::Owned(other.as_bytes().into_owned()),
        }
    }
}

fn leading_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let v: i64 = std::str::from_utf8(&digits[..n]).ok()?.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Variables of one scope.
#[derive(Debug, Default, Clone)]
pub struct Vars(Vec<(String, Sample<'static>)>);

impl Vars {
    pub fn get(&self, name: &str) -> Option<&Sample<'static>> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Sets `name` if `conds` allow it (`always_exists`: a `proc.` variable, which HAProxy
    /// creates with the configuration).
    pub fn set_if(
        &mut self,
        name: &str,
        value: Sample<'static>,
        conds: &VarConds,
        always_exists: bool,
    ) {
        let current = self.get(name);
        if conds.allow(always_exists || current.is_some(), current, &value) {
            self.set(name, value);
        }
    }

    pub fn set(&mut self, name: &str, value: Sample<'static>) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name.to_string(), value)),
        }
    }

    pub fn unset(&mut self, name: &str) {
        self.0.retain(|(n, _)| n != name);
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// A log-format string as rule values use it (`X-Client: %[src]`): text and sample
/// expressions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fmt(pub Vec<FmtPart>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FmtPart {
    Text(String),
    Expr(Expr),
}

impl Fetch {
    /// Whether the sample comes from the request head (what an editing rule may change).
    pub fn reads_request(&self) -> bool {
        use Fetch::*;
        matches!(
            self,
            Method
                | Path
                | PathQ
                | Query
                | Url
                | UrlParam(_)
                | Base
                | ReqHdr(..)
                | Hdr(..)
                | ReqHdrCnt(..)
                | ReqFhdr(..)
                | ReqCook(_)
                | ReqCookCnt(_)
                | PayloadLen(PayloadSide::Req)
                | ReqVer
                | HttpAuth(_)
                | HttpAuthGroup(_)
                | Base32
                | Url32
                | Base32Src
                | CaptureReqMethod
                | CaptureReqUri
                | CaptureReqVer
                | HttpAuthType
                | HttpAuthUser
                | HttpAuthPass
        )
    }

    /// Whether it needs the request's head, which HAProxy no longer has once the response
    /// is in (its `HTTP request headers` fetches): response rules may not use it. The
    /// method and the captures (`capture.req.*`) stay.
    pub fn needs_request_head(&self) -> bool {
        self.request_head_keyword().is_some()
    }

    /// HAProxy's keyword for a fetch that needs the request's head.
    pub fn request_head_keyword(&self) -> Option<&'static str> {
        use Fetch::*;
        Some(match self {
            Path => "path",
            PathQ => "pathq",
            Query => "query",
            Url => "url",
            UrlParam(_) => "url_param",
            Base => "base",
            ReqHdr(..) => "req.hdr",
            ReqHdrCnt(..) => "req.hdr_cnt",
            ReqFhdr(..) => "req.fhdr",
            ReqCook(_) => "req.cook",
            ReqCookCnt(_) => "req.cook_cnt",
            ReqVer => "req.ver",
            HttpAuth(_) => "http_auth",
            HttpAuthGroup(_) => "http_auth_group",
            HttpAuthType => "http_auth_type",
            HttpAuthUser => "http_auth_user",
            HttpAuthPass => "http_auth_pass",
            Base32 => "base32",
            Url32 => "url32",
            Base32Src => "base32+src",
            ReqBody => "req.body",
            ReqBodyLen => "req.body_len",
            ReqBodySize => "req.body_size",
            ReqBodyParam(_) => "req.body_param",
            ReqCookVal(_) => "req.cook_val",
            ReqHdrIp(..) => "req.hdr_ip",
            HttpAuthBearer(_) => "http_auth_bearer",
            _ => return None,
        })
    }

    /// Whether the sample may differ once the response is in: the response itself, or a
    /// variable response rules may have set.
    pub fn reads_response(&self) -> bool {
        use Fetch::*;
        matches!(
            self,
            ResHdr(..)
                | Hdr(..)
                | ResFhdr(..)
                | ResHdrCnt(..)
                | ResCook(_)
                | ResCookCnt(_)
                | Status
                | ResVer
                | ResBody
                | ResBodyLen
                | ResBodySize
                | ResCacheHit
                | ResCacheName
                | SslBc
                | SslBcProtocol
                | SslBcCipher
                | SslBcAlpn
                | Var(_)
        )
    }
}

impl Expr {
    /// Whether evaluating it reads the request head.
    pub fn reads_request(&self) -> bool {
        self.fetch.reads_request()
    }

    /// Whether evaluating it may read the response (`Fetch::reads_response`).
    pub fn reads_response(&self) -> bool {
        self.fetch.reads_response()
    }
}

impl Fmt {
    /// Whether rendering it reads the request head.
    pub fn reads_request(&self) -> bool {
        self.exprs().any(Expr::reads_request)
    }

    /// The expressions it renders.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.0.iter().filter_map(|p| match p {
            FmtPart::Expr(e) => Some(e),
            FmtPart::Text(_) => None,
        })
    }

    /// The text of a format without any expression.
    pub fn literal(&self) -> Option<&str> {
        match self.0.as_slice() {
            [] => Some(""),
            [FmtPart::Text(t)] => Some(t),
            _ => None,
        }
    }
}
