//! OpenSSL-style lists (`ciphers`, `ciphersuites`, `curves`, `sigalgs`) read as OpenSSL
//! reads them, so that the lists operators copy from Mozilla's guidelines work unchanged.
//!
//! OpenSSL skips the names it cannot use (a DHE or CBC suite, a curve it lacks) and refuses
//! a list only when nothing in it is usable; HAProxy therefore accepts such lists. sluice
//! does the same, and returns the skipped names so that the loader warns of them once.
//! Cipher lists also take OpenSSL's aliases and `+` combinations (`HIGH`, `ECDHE+AESGCM`,
//! `EECDH+CHACHA20`), and `!X`/`-X` remove what X names.

#[cfg(feature = "aws-lc")]
use rustls::crypto::aws_lc_rs as asym;
use rustls::crypto::ring as provider;
#[cfg(not(feature = "aws-lc"))]
use rustls::crypto::ring as asym;

/// The rustls suites by their OpenSSL names (what HAProxy's `ciphers` and
/// `ciphersuites` and its `ssl_fc_cipher` use), in the default order of preference (the
/// server's order wins by default, as in HAProxy).
///
/// AES-128-GCM comes before AES-256-GCM, unlike rustls's own order: the 128-bit suites are
/// what browsers ask for first and what TLS 1.3 makes mandatory, and their key schedule uses
/// SHA-256, which CPUs with SHA extensions run far faster than the SHA-384 of the 256-bit
/// suites: a full TLS 1.3 handshake costs about 6 % less CPU (bench/tls.py).
pub(super) const SUITES: &[(&str, rustls::SupportedCipherSuite)] = &[
    (
        "TLS_AES_128_GCM_SHA256",
        provider::cipher_suite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_AES_256_GCM_SHA384",
        provider::cipher_suite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        provider::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        provider::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// The key exchange group an OpenSSL curve name names, if rustls has it.
pub(super) fn group(name: &str) -> Option<&'static dyn rustls::crypto::SupportedKxGroup> {
    match name {
        "X25519" | "x25519" => Some(asym::kx_group::X25519),
        "P-256" | "prime256v1" | "secp256r1" => Some(asym::kx_group::SECP256R1),
        "P-384" | "secp384r1" => Some(asym::kx_group::SECP384R1),
        _ => None,
    }
}

/// The signature scheme an OpenSSL signature algorithm name names (`RSA+SHA256`,
/// `RSA-PSS+SHA256`, `ECDSA+SHA256`, or TLS 1.3's `rsa_pss_rsae_sha256`,
/// `ecdsa_secp256r1_sha256`, `ed25519`, `rsa_pkcs1_sha256`), if rustls signs and verifies
/// with it.
pub(super) fn sigalg(name: &str) -> Option<rustls::SignatureScheme> {
    use rustls::SignatureScheme as S;
    let scheme = match name.to_ascii_lowercase().as_str() {
        "rsa+sha256" | "rsa_pkcs1_sha256" => S::RSA_PKCS1_SHA256,
        "rsa+sha384" | "rsa_pkcs1_sha384" => S::RSA_PKCS1_SHA384,
        "rsa+sha512" | "rsa_pkcs1_sha512" => S::RSA_PKCS1_SHA512,
        "rsa-pss+sha256" | "rsa_pss_rsae_sha256" => S::RSA_PSS_SHA256,
        "rsa-pss+sha384" | "rsa_pss_rsae_sha384" => S::RSA_PSS_SHA384,
        "rsa-pss+sha512" | "rsa_pss_rsae_sha512" => S::RSA_PSS_SHA512,
        "ecdsa+sha256" | "ecdsa_secp256r1_sha256" => S::ECDSA_NISTP256_SHA256,
        "ecdsa+sha384" | "ecdsa_secp384r1_sha384" => S::ECDSA_NISTP384_SHA384,
        "ecdsa+sha512" | "ecdsa_secp521r1_sha512" => S::ECDSA_NISTP521_SHA512,
        "ed25519" => S::ED25519,
        _ => return None,
    };
    // What sluice's provider verifies with (ring's algorithms, see `super::crypto`).
    rustls::crypto::ring::default_provider()
        .signature_verification_algorithms
        .supported_schemes()
        .contains(&scheme)
        .then_some(scheme)
}

/// The signature schemes of a `sigalgs` or `client-sigalgs` list (colon-separated).
pub fn sigalgs(list: &str) -> Result<Read<rustls::SignatureScheme>, String> {
    let mut read = Read {
        chosen: Vec::new(),
        skipped: Vec::new(),
    };
    for w in list.split(':').filter(|w| !w.is_empty()) {
        match sigalg(w) {
            Some(s) if !read.chosen.contains(&s) => read.chosen.push(s),
            Some(_) => {}
            None => read.skipped.push(w.to_string()),
        }
    }
    if read.chosen.is_empty() {
        return Err(format!(
            "no usable signature algorithm in '{list}' (rustls has RSA+SHA256/384/512, RSA-PSS+SHA256/384/512, ECDSA+SHA256/384, ed25519)"
        ));
    }
    Ok(read)
}

/// What a list chose, and the names in it that are of no use here.
#[derive(Debug)]
pub struct Read<T> {
    pub chosen: Vec<T>,
    pub skipped: Vec<String>,
}

/// The suites of a cipher list, for TLS 1.3 (`ciphersuites`) or 1.2 (`ciphers`), in the
/// list's order.
pub fn suites(list: &str, tls13: bool) -> Result<Read<rustls::SupportedCipherSuite>, String> {
    let mut chosen: Vec<&(&str, rustls::SupportedCipherSuite)> = Vec::new();
    let mut banned: Vec<&str> = Vec::new();
    let mut skipped = Vec::new();
    let of_version = |s: &rustls::SupportedCipherSuite| {
        matches!(s, rustls::SupportedCipherSuite::Tls13(_)) == tls13
    };
    for word in list.split([':', ',', ' ']).filter(|w| !w.is_empty()) {
        let (remove, forever, spec) = match word.as_bytes()[0] {
            b'!' => (true, true, &word[1..]),
            b'-' => (true, false, &word[1..]),
            b'+' => (false, false, &word[1..]),
            _ => (false, false, word),
        };
        let named: Vec<_> = SUITES
            .iter()
            .filter(|(n, s)| of_version(s) && names(spec, n))
            .collect();
        if remove {
            chosen.retain(|(n, _)| !names(spec, n));
            if forever {
                banned.push(spec);
            }
            continue;
        }
        if named.is_empty() && !known_alias(spec) {
            skipped.push(word.to_string());
        }
        for s in named {
            if !chosen.iter().any(|c| c.0 == s.0) && !banned.iter().any(|b| names(b, s.0)) {
                chosen.push(s);
            }
        }
    }
    if chosen.is_empty() {
        let have: Vec<&str> = SUITES
            .iter()
            .filter(|(_, s)| of_version(s))
            .map(|(n, _)| *n)
            .collect();
        return Err(format!(
            "no usable cipher in '{list}' (rustls implements {})",
            have.join(":")
        ));
    }
    Ok(Read {
        chosen: chosen.into_iter().map(|(_, s)| *s).collect(),
        skipped,
    })
}

/// Whether an OpenSSL cipher-list word (a name, an alias, or aliases joined by `+`) names
/// the suite called `suite` (OpenSSL's name).
fn names(spec: &str, suite: &str) -> bool {
    spec == suite || spec.split('+').all(|part| alias_holds(part, suite))
}

/// One alias of OpenSSL's, for a suite rustls implements (all of them forward secret and
/// AEAD: TLS 1.3's, and TLS 1.2's with ECDHE).
fn alias_holds(alias: &str, suite: &str) -> bool {
    let tls13 = suite.starts_with("TLS_");
    match alias {
        "ALL" | "DEFAULT" | "HIGH" | "SECURE" | "COMPLEMENTOFDEFAULT" => true,
        "ECDHE" | "EECDH" | "kEECDH" | "kECDHE" | "ECDH" | "TLSv1.2" => !tls13,
        "ECDSA" | "aECDSA" => suite.contains("ECDSA"),
        "RSA" | "aRSA" => suite.contains("-RSA-"),
        "AESGCM" | "AEAD" => suite.contains("GCM") || suite.contains("POLY1305"),
        "AES" => suite.contains("AES"),
        "AES128" => suite.contains("AES128") || suite.contains("AES_128"),
        "AES256" => suite.contains("AES256") || suite.contains("AES_256"),
        "CHACHA20" => suite.contains("CHACHA20"),
        "SHA256" => suite.ends_with("SHA256") || suite.contains("POLY1305"),
        "SHA384" => suite.ends_with("SHA384"),
        _ => false,
    }
}

/// Aliases OpenSSL knows that name nothing rustls has (`EDH`, `aNULL`, `MD5`, ...): no
/// warning for them, only for names that are really missing.
fn known_alias(spec: &str) -> bool {
    spec.split('+').all(|part| {
        matches!(
            part,
            "EDH"
                | "DHE"
                | "kEDH"
                | "kDHE"
                | "aNULL"
                | "eNULL"
                | "NULL"
                | "MD5"
                | "RC4"
                | "DES"
                | "3DES"
                | "EXPORT"
                | "LOW"
                | "MEDIUM"
                | "PSK"
                | "SRP"
                | "DSS"
                | "aDSS"
                | "CAMELLIA"
                | "SEED"
                | "IDEA"
                | "SHA"
                | "SHA1"
                | "CBC"
                | "kRSA"
                | "ADH"
                | "AECDH"
                | "DH"
                | "SSLv3"
                | "TLSv1"
                | "TLSv1.0"
                | "CCM"
                | "ARIA"
                | "@STRENGTH"
                | "@SECLEVEL=1"
                | "@SECLEVEL=2"
        ) || alias_holds(part, "ECDHE-RSA-AES128-GCM-SHA256")
            || alias_holds(part, "TLS_AES_128_GCM_SHA256")
    })
}

/// The key exchange groups of a `curves` list.
pub fn groups(list: &str) -> Result<Read<&'static dyn rustls::crypto::SupportedKxGroup>, String> {
    let mut read = Read {
        chosen: Vec::new(),
        skipped: Vec::new(),
    };
    for w in list.split(':').filter(|w| !w.is_empty()) {
        match group(w) {
            Some(g) => read.chosen.push(g),
            None => read.skipped.push(w.to_string()),
        }
    }
    if read.chosen.is_empty() {
        return Err(format!(
            "no usable curve in '{list}' (rustls implements X25519, P-256, P-384)"
        ));
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(list: &str, tls13: bool) -> (Vec<&'static str>, Vec<String>) {
        let r = suites(list, tls13).unwrap();
        let names = r
            .chosen
            .iter()
            .map(|s| super::super::suite_name(s.suite()))
            .collect();
        (names, r.skipped)
    }

    #[test]
    fn mozillas_intermediate_list_keeps_what_rustls_has() {
        let list = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305";
        let (names, skipped) = chosen(list, false);
        assert_eq!(names.len(), 6);
        assert_eq!(names[0], "ECDHE-ECDSA-AES128-GCM-SHA256");
        assert_eq!(
            skipped,
            [
                "DHE-RSA-AES128-GCM-SHA256",
                "DHE-RSA-AES256-GCM-SHA384",
                "DHE-RSA-CHACHA20-POLY1305"
            ]
        );
    }

    #[test]
    fn aliases_and_exclusions() {
        let (names, skipped) = chosen("HIGH:!aNULL:!MD5", false);
        assert_eq!(names.len(), 6);
        assert!(skipped.is_empty());
        let (names, _) = chosen("EECDH+AESGCM:EDH+AESGCM:!ECDSA", false);
        assert_eq!(
            names,
            [
                "ECDHE-RSA-AES128-GCM-SHA256",
                "ECDHE-RSA-AES256-GCM-SHA384",
                "ECDHE-RSA-CHACHA20-POLY1305"
            ]
        );
        let (names, _) = chosen("ECDHE+CHACHA20:ECDHE+AES128", false);
        assert_eq!(names[0], "ECDHE-ECDSA-CHACHA20-POLY1305");
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn a_list_with_nothing_usable_is_refused() {
        let e = suites("DHE-RSA-AES128-SHA:AES128-SHA", false).unwrap_err();
        assert!(e.contains("no usable cipher"), "{e}");
        // A TLS 1.3 name in a TLS 1.2 list is of no use there, as with OpenSSL.
        assert!(suites("TLS_AES_128_GCM_SHA256", false).is_err());
        let r = suites("TLS_AES_256_GCM_SHA384:TLS_AES_128_CCM_SHA256", true).unwrap();
        assert_eq!(r.chosen.len(), 1);
        assert_eq!(r.skipped, ["TLS_AES_128_CCM_SHA256"]);
    }

    #[test]
    fn curves_skip_what_is_missing() {
        let r = groups("X25519:prime256v1:secp521r1:ffdhe2048").unwrap();
        assert_eq!(r.chosen.len(), 2);
        assert_eq!(r.skipped, ["secp521r1", "ffdhe2048"]);
        assert!(groups("secp521r1").is_err());
    }
}
