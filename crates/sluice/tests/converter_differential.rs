//! Converters and fetches compared with HAProxy 2.6's answers for the same requests: each
//! expression is rendered by `http-request return ... lf-string` for four inputs (the
//! request's `X-In` header, `IN` in an expression; `FIN` takes it whole, commas included), and `testdata/haproxy-2.6/converters.txt` holds what HAProxy
//! 2.6.12 answered (`bash testdata/haproxy-2.6/record-converters.sh` records it again).

mod common;

use common::*;

/// The expressions; `IN` stands for the request's `X-In` header, `FIN` for all of it,
/// `MAPS` for the directory of the recorded answers (and of the map files they use).
const EXPRESSIONS: &[&str] = &[
    "IN,sha1,hex",
    "IN,sha2,hex",
    "IN,sha2(256),hex",
    "IN,sha2(384),hex",
    "IN,sha2(512),hex",
    "IN,digest(sha256),hex",
    "IN,digest(sha1),base64",
    "IN,hmac(sha256,c2VjcmV0),hex",
    "IN,hmac(sha1,c2VjcmV0),base64",
    "IN,ub64enc",
    "IN,ub64enc,ub64dec",
    "IN,url_enc",
    "str(1A2b),hex2i",
    "str(ffffffffffffffff),hex2i",
    "IN,hex2i",
    "IN,url_enc(query)",
    "IN,be2dec(-,2)",
    "IN,be2dec(.,3,1)",
    "IN,be2hex",
    "IN,be2hex(:,2)",
    "IN,be2hex(,4,1)",
    "IN,length,bool,iif(long,short)",
    "IN,secure_memcmp(txn.other)",
    "IN,strcmp(txn.other)",
    "src_is_local",
    "dst_is_local",
    "fc_http_major",
    "fc_unacked",
    "fc_sacked",
    "fc_lost",
    "fc_retrans",
    "fc_fackets",
    "fc_reordering,bool",
    "fc_rtt(us),bool",
    "fc_rtt,add(1),bool",
    "stopping",
    "base32",
    "url32",
    "base32+src,hex",
    "capture.req.method",
    "capture.req.uri",
    "capture.req.ver",
    "req.ver",
    "req.body_len",
    "req.body_size",
    "req.body_param(b)",
    "srv_is_up(be/s)",
    "srv_conn(be/s)",
    "srv_sess_rate(be/s)",
    "http_first_req",
    "so_id",
    "so_name",
    "IN,add_item(;,txn.other,-end)",
    "IN,add_item(;,txn.nothing)",
    "str(),add_item(;,txn.other)",
    "FIN,json_query('\\$.a.b[0]')",
    "FIN,json_query('\\$.a.b[0]',int)",
    "FIN,json_query('\\$.a.b[1]')",
    "FIN,json_query('\\$.a.b[2]')",
    "FIN,json_query('\\$.n')",
    "FIN,json_query('\\$.n',int)",
    "FIN,json_query('\\$.big')",
    "FIN,json_query('\\$.tiny')",
    "FIN,json_query('\\$.s')",
    "FIN,json_query('\\$.z')",
    "FIN,json_query('\\$.a')",
    "FIN,json_query('\\$.missing')",
    "IN,map_regm(MAPS/regm.map)",
    "IN,map_regm(MAPS/regm.map,none)",
    "IN,map_reg(MAPS/regm.map,none)",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_header_query('\\$.alg')",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_payload_query('\\$.iat',int)",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_payload_query('\\$.name')",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_verify(HS256,your-256-bit-secret)",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_verify(HS256,wrong)",
    "str(eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c),jwt_verify(txn.alg,your-256-bit-secret)",
    "str(abc),jwt_verify(HS256,wrong)",
    "str(eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ.gbi9B4URSzP5iXWcnRHl3hpAZ02RBk4bnTKMK16IF9DsT-TLttWLojJZmvgdwAnMf3r_K0JP6f1M-2FNe_im_GrwugWDnLcwS7lCa8xnKwFM2eljGAlym9uosDQ4oZ2eQVE7zk9qR8ilwxBHKOC9TyRnimdIu1QuNdV-pxC7t5NXmZwK_pekYpefcLxRi9neNKp_soTnaYEzaicDb8q30JzKDgJgqMzKasX9GPk9p16Lfw7azpftYK_2kf8rG2WZs-a_tt83wIKTFph8_abGoUwGWgopX6dvlnXWWHQQFryzGtK7ksJVda7oaTWQ7K5qWfaHH5kXZA4vKbGz0ZUrLw),jwt_verify(RS256,MAPS/jwt-rsa.pem)",
    "str(eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ.gbi9B4URSzP5iXWcnRHl3hpAZ02RBk4bnTKMK16IF9DsT-TLttWLojJZmvgdwAnMf3r_K0JP6f1M-2FNe_im_GrwugWDnLcwS7lCa8xnKwFM2eljGAlym9uosDQ4oZ2eQVE7zk9qR8ilwxBHKOC9TyRnimdIu1QuNdV-pxC7t5NXmZwK_pekYpefcLxRi9neNKp_soTnaYEzaicDb8q30JzKDgJgqMzKasX9GPk9p16Lfw7azpftYK_2kf8rG2WZs-a_tt83wIKTFph8_abGoUwGWgopX6dvlnXWWHQQFryzGtK7ksJVda7oaTWQ7K5qWfaHH5kXZA4vKbGz0ZAAAA),jwt_verify(RS256,MAPS/jwt-rsa.pem)",
    "str(eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ.azuv0Bg9QJ7GBxGyenahIsNhIBRFILdsIXEQVakwuWv25vqovoYU9R0YJ4RGeWw0EaWmXMwSsALZHmn1lWbQJg),jwt_verify(ES256,MAPS/jwt-ec.pem)",
    "str(eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ.azuv0Bg9QJ7GBxGyenahIsNhIBRFILdsIXEQVakwuWv25vqovoYU9R0YJ4RGeWw0EaWmXMwSsALZHmn1lWbQJg),jwt_verify(ES256,MAPS/jwt-rsa.pem)",
    "str(eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsIm4iOjQyfQ.gbi9B4URSzP5iXWcnRHl3hpAZ02RBk4bnTKMK16IF9DsT-TLttWLojJZmvgdwAnMf3r_K0JP6f1M-2FNe_im_GrwugWDnLcwS7lCa8xnKwFM2eljGAlym9uosDQ4oZ2eQVE7zk9qR8ilwxBHKOC9TyRnimdIu1QuNdV-pxC7t5NXmZwK_pekYpefcLxRi9neNKp_soTnaYEzaicDb8q30JzKDgJgqMzKasX9GPk9p16Lfw7azpftYK_2kf8rG2WZs-a_tt83wIKTFph8_abGoUwGWgopX6dvlnXWWHQQFryzGtK7ksJVda7oaTWQ7K5qWfaHH5kXZA4vKbGz0ZUrLw),jwt_payload_query('\\$.n',int)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393001),fix_is_valid",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393101),fix_is_valid",
    "bin(383D4649582E342E3401393D32340133353D410134393D0135363D5345525645520133343D310131303D32333001),fix_is_valid",
    "bin(383D4649582E342E3401393D32350134393D580133353D410135363D5345525645520133343D310131303D30363301),fix_is_valid",
    "bin(383D464958542E312E3101393D32320133353D410134393D430135363D5301313530303D390131303D30383801),fix_is_valid",
    "bin(383D4649582E342E3001393D32320133353D410134393D430135363D5301313530303D390131303D30303601),fix_is_valid",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D53455256455201),fix_is_valid",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393001),fix_tag_value(MsgType)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393001),fix_tag_value(49)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393001),fix_tag_value(targetcompid)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D5345525645520133343D310139383D30013130383D33300131303D31393001),fix_tag_value(999)",
    "bin(383D4649582E342E3401393D32340133353D410134393D0135363D5345525645520133343D310131303D32333001),fix_tag_value(SenderCompID)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D53455256455201),fix_tag_value(56)",
    "bin(383D4649582E342E3401393D34320133353D410134393D434C49454E540135363D53455256455201),fix_tag_value(34)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_is_valid",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_is_valid",
    "bin(101100064D51497364700302000A00036F6C64),mqtt_is_valid",
    "bin(20020000),mqtt_is_valid",
    "bin(200E01000B2401120001781F00026F6B),mqtt_is_valid",
    "bin(20050000029900),mqtt_is_valid",
    "bin(100F00044D51545404C3003C0003636964),mqtt_is_valid",
    "bin(30050001746869),mqtt_is_valid",
    "bin(101900044D51545404C2003C000363696400047573657200),mqtt_is_valid",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,client_identifier)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(1,username)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(connect,password)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,protocol_name)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,protocol_version)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,flags)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,keepalive)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNECT,17)",
    "bin(101900044D51545404C2003C000363696400047573657200027077),mqtt_field_value(CONNACK,flags)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,client_identifier)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,17)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,33)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,39)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,24)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,3)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,1)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,will_topic)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,will_payload)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,username)",
    "bin(103D00044D5154540586001E0F11000000782100142600016B0001760002633512180000000503000A746578742F706C61696E000277740002777000027535),mqtt_field_value(CONNECT,21)",
    "bin(101100064D51497364700302000A00036F6C64),mqtt_field_value(CONNECT,protocol_name)",
    "bin(101100064D51497364700302000A00036F6C64),mqtt_field_value(CONNECT,client_identifier)",
    "bin(20020000),mqtt_field_value(CONNACK,reason_code)",
    "bin(20020000),mqtt_field_value(CONNACK,protocol_version)",
    "bin(20020000),mqtt_field_value(CONNACK,36)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,flags)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,protocol_version)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,36)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,18)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,31)",
    "bin(200E01000B2401120001781F00026F6B),mqtt_field_value(CONNACK,17)",
    "bin(20050000029900),mqtt_field_value(CONNACK,reason_code)",
    "bin(101900044D51545404C2003C000363696400047573657200),mqtt_field_value(CONNECT,client_identifier)",
    "bin(30050001746869),mqtt_field_value(PUBLISH,3)",
    "str(/api/v2/x),map_beg(MAPS/prefix.map,none)",
    "str(/api/v3),map_beg(MAPS/prefix.map,none)",
    "str(/other),map_beg(MAPS/prefix.map,none)",
    "str(/api),map_beg(MAPS/prefix.map,none)",
    "ipv4(10.1.2.3),map_ip(MAPS/ip.map,none)",
    "ipv4(10.1.9.9),map_ip(MAPS/ip.map,none)",
    "ipv4(10.2.0.1),map_ip(MAPS/ip.map,none)",
    "ipv4(11.0.0.1),map_ip(MAPS/ip.map,none)",
    "str(/api/v2/x),map_beg_int(MAPS/prefix-int.map,0),add(1)",
    "str(/nowhere),map_beg_int(MAPS/prefix-int.map,5),add(1)",
    "str(/api/x),map_str_int(MAPS/prefix-int.map,7)",
    "IN,crc32c",
    "IN,crc32c(1)",
    "IN,xxh32",
    "IN,xxh32(7)",
    "IN,xxh64",
    "IN,xxh64(7)",
    "int(1700000000),http_date",
    "int(1700000000),http_date(3600)",
    "int(1700000000123),http_date(0,ms)",
    "int(1700000000005),http_date(0,ms)",
    "int(1700000000123456),http_date(-1000000,us)",
    "str('fr-CH, fr;q=0.9, en;q=0.8'),language(es;fr;en)",
    "str('de, en;q=0.5, es;q=0.7'),language(es;fr;en)",
    "str(de),language(es;fr;en,nl)",
    "str(de),language(es;fr;en)",
    "str('en;q=0, fr;q=0.001'),language(fr;en)",
    "str('en x, fr;q=0.5'),language(en;fr)",
    "IN,language(abc;hello)",
    "IN,sha2(224),hex",
    "IN,digest(sha224),hex",
    "IN,hmac(sha224,c2VjcmV0),hex",
];

/// Inputs, sent as the `X-In` header.
const INPUTS: &[&str] = &[
    "hello world",
    "abc",
    "a/b?c=d&e f~",
    r#"{"a":{"b":[10,"x",true]},"n":1.5,"big":123456789,"tiny":0.0000125,"s":"q\u0041","z":null}"#,
];

fn config() -> String {
    let mut c = String::from(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 2s\n    timeout server 2s\nfrontend fe\n    {fe}\n    option http-buffer-request\n    http-request set-var(txn.other) str(abc)\n    http-request set-var(txn.alg) str(HS256)\n",
    );
    for (i, e) in EXPRESSIONS.iter().enumerate() {
        // (`c.push_str` below; a backend for the server fetches comes after.)
        c.push_str(&format!(
            "    http-request return status 200 content-type text/plain lf-string \"%[{}]\" if {{ path /c{i} }}\n",
            e.replace("FIN,", "req.fhdr(x-in),")
                .replace("IN,", "req.hdr(x-in),")
                .replace("MAPS", &reference_dir().display().to_string())
        ));
    }
    c.push_str("    default_backend be\nbackend be\n    server s 127.0.0.1:9\n");
    c
}

fn answers(p: &Sluice) -> Vec<String> {
    let mut out = Vec::new();
    for (i, e) in EXPRESSIONS.iter().enumerate() {
        for input in INPUTS {
            let mut c = Conn::new(p.addr());
            c.send(
                format!(
                    "POST /c{i}?q={i} HTTP/1.1\r\nHost: t.example\r\nX-In: {input}\r\nContent-Length: 9\r\nConnection: close\r\n\r\na=1&b=two"
                )
                .as_bytes(),
            );
            let r = c.response();
            out.push(format!("{e}\t{input}\t{}\t{}", r.status, r.text()));
        }
    }
    out
}

fn reference_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/haproxy-2.6")
}

fn reference() -> std::path::PathBuf {
    reference_dir().join("converters.txt")
}

#[test]
fn converters_answer_as_haproxy_26() {
    if std::env::var("SLUICE_CONV_RECORD").as_deref() == Ok("haproxy") {
        let p = Sluice::start_program("haproxy", &["-db"], &config());
        std::fs::write(reference(), answers(&p).join("\n") + "\n").unwrap();
        return;
    }
    let p = Sluice::start(&config());
    let got = answers(&p);
    let want = std::fs::read_to_string(reference()).unwrap();
    let differ: Vec<String> = want
        .lines()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("haproxy {w:?}\nsluice  {g:?}"))
        .collect();
    assert_eq!(want.lines().count(), got.len());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn uuid_gives_fresh_version_4_uuids() {
    let p = Sluice::start(
        "defaults\n    mode http\n    timeout client 2s\nfrontend fe\n    {fe}\n    http-request return status 200 content-type text/plain lf-string \"%[uuid] %[uuid(4)]\"\n",
    );
    let text = get(p.addr(), "/").text();
    let ids: Vec<&str> = text.split(' ').collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    for id in ids {
        let groups: Vec<&str> = id.split('-').collect();
        let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        assert_eq!(lens, [8, 4, 4, 4, 12], "{id}");
        assert!(groups[2].starts_with('4'), "version 4: {id}");
        assert!("89ab".contains(&groups[3][..1]), "RFC 4122 variant: {id}");
        assert!(
            id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()),
            "{id}"
        );
    }
}

#[test]
fn connection_fetches_see_the_listener_the_thread_and_the_first_request() {
    let origin = Origin::start("o");
    let port = free_port();
    let p = Sluice::start(&format!(
        "global\n    nbthread 2\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 2s\n    timeout server 2s\nfrontend fe\n    {{fe}}\n    bind 127.0.0.1:{port} name public\n    http-request return status 200 content-type text/plain lf-string \"%[http_first_req] %[so_id] %[so_name] %[thread]\" if {{ path /who }}\n    http-request return status 200 content-type text/plain lf-string \"%[srv_sess_rate(be/s)]\" if {{ path /rate }}\n    default_backend be\nbackend be\n    server s {}\n",
        origin.addr
    ));
    let fields = |text: String| text.split(' ').map(str::to_string).collect::<Vec<_>>();
    // The first listener has no name: `so_name` finds nothing.
    let mut c = Conn::new(p.addr());
    let first = fields(c.get("/who").text());
    assert_eq!(first[..3], ["1", "1", ""]);
    assert!(["0", "1"].contains(&first[3].as_str()), "{first:?}");
    // The next request of the same connection is not the first; same thread.
    let next = fields(c.get("/who").text());
    assert_eq!(next[..3], ["0", "1", ""]);
    assert_eq!(next[3], first[3], "a connection stays on its thread");
    let mut c = Conn::new(format!("127.0.0.1:{port}").parse().unwrap());
    assert_eq!(fields(c.get("/who").text())[..3], ["1", "2", "public"]);
    // A session sent to the server shows in its rate (read at once, retried should a
    // second have passed in between on a slow machine).
    let rate = (0..20).find_map(|_| {
        assert_eq!(get(p.addr(), "/to-server").status, 200);
        let r: u64 = get(p.addr(), "/rate").text().parse().unwrap();
        (r >= 1).then_some(r)
    });
    assert!(rate.is_some(), "srv_sess_rate never counted a session");
}
