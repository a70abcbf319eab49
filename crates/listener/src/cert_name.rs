//! The user name a client certificate logs in as with SASL EXTERNAL, made the way RabbitMQ's
//! `ssl_cert_login_from` makes it: the subject's distinguished name as an RFC 4514 string
//! (`CN=client,O=Org,C=GB`: the certificate's RDNs in reverse order, RabbitMQ's attribute
//! abbreviations, RabbitMQ's escaping), or only the common name(s).
//!
//! The certificate handed to us has been verified by rustls (webpki) against the configured
//! CA, so it is well-formed DER; the walk below still checks every length and answers `None`
//! rather than panic on anything it does not understand.

/// Where the EXTERNAL user name comes from (RabbitMQ's `ssl_cert_login_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CertLoginFrom {
    /// The whole subject DN, RabbitMQ's default.
    #[default]
    DistinguishedName,
    /// The subject's CN values, joined with ',' when there are several.
    CommonName,
}

/// The login name in a DER certificate, or None when it has no such name (or is not DER).
pub fn login_name(cert_der: &[u8], from: CertLoginFrom) -> Option<String> {
    let subject = subject_rdns(cert_der)?;
    match from {
        CertLoginFrom::DistinguishedName => {
            let rdns: Vec<String> = subject
                .iter()
                .rev()
                .map(|rdn| {
                    rdn.iter()
                        .map(|(oid, value)| format!("{}={}", attribute_name(oid), escape(value)))
                        .collect::<Vec<_>>()
                        .join("+")
                })
                .collect();
            Some(rdns.join(","))
        }
        CertLoginFrom::CommonName => {
            let cns: Vec<&str> = subject
                .iter()
                .flatten()
                .filter(|(oid, _)| oid == "2.5.4.3")
                .map(|(_, v)| v.as_str())
                .collect();
            (!cns.is_empty()).then(|| cns.join(","))
        }
    }
}

/// One attribute: its OID in dotted form and its value as text.
type Attribute = (String, String);

/// The subject's RDNs in certificate order, each a set of attributes.
fn subject_rdns(cert_der: &[u8]) -> Option<Vec<Vec<Attribute>>> {
    const SEQUENCE: u8 = 0x30;
    const SET: u8 = 0x31;
    const VERSION: u8 = 0xa0; // [0] EXPLICIT
    let (certificate, _) = element(cert_der, SEQUENCE)?;
    let (mut tbs, _) = element(certificate, SEQUENCE)?;
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs, VERSION)?.1;
    }
    // serialNumber, signature, issuer, validity, then subject.
    let tbs = element(tbs, 0x02)?.1;
    let tbs = element(tbs, SEQUENCE)?.1;
    let tbs = element(tbs, SEQUENCE)?.1;
    let tbs = element(tbs, SEQUENCE)?.1;
    let (mut name, _) = element(tbs, SEQUENCE)?;
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (mut set, rest) = element(name, SET)?;
        name = rest;
        let mut rdn = Vec::new();
        while !set.is_empty() {
            let (attribute, rest) = element(set, SEQUENCE)?;
            set = rest;
            let (oid, value) = element(attribute, 0x06)?;
            let (&tag, _) = value.split_first()?;
            let (value, _) = element(value, tag)?;
            rdn.push((dotted_oid(oid)?, string_value(tag, value)?));
        }
        rdns.push(rdn);
    }
    Some(rdns)
}

/// The contents of the DER element at the start of `der` if its tag is `tag`, and what
/// follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (len0 as usize, rest)
    } else {
        let n = (len0 & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

fn dotted_oid(der: &[u8]) -> Option<String> {
    let mut subidentifiers = Vec::new();
    let mut acc: u64 = 0;
    for &b in der {
        acc = acc.checked_mul(128)? | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            subidentifiers.push(acc);
            acc = 0;
        }
    }
    // The first subidentifier packs the first two arcs (X.690 8.19.4).
    let (&first, rest) = subidentifiers.split_first()?;
    let top = (first / 40).min(2);
    let mut dotted = format!("{top}.{}", first - 40 * top);
    for arc in rest {
        dotted.push_str(&format!(".{arc}"));
    }
    Some(dotted)
}

/// A directory string as text: UTF-8, printable and IA5 as they are, teletex as Latin-1
/// (as RabbitMQ reads it), BMP as UCS-2 and universal as UCS-4.
fn string_value(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec()).ok(),
        0x14 => Some(value.iter().map(|&b| b as char).collect()),
        0x1e => char::decode_utf16(
            value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]])),
        )
        .collect::<Result<String, _>>()
        .ok(),
        0x1c => value
            .chunks_exact(4)
            .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        _ => None,
    }
}

/// RabbitMQ's names for attribute types (rabbit_cert_info:format_rdn); others in dotted form.
fn attribute_name(oid: &str) -> &str {
    match oid {
        "2.5.4.4" => "SN",
        "2.5.4.42" => "GIVENNAME",
        "2.5.4.43" => "INITIALS",
        "2.5.4.44" => "GENERATIONQUALIFIER",
        "2.5.4.3" => "CN",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.12" => "TITLE",
        "2.5.4.6" => "C",
        "2.5.4.5" => "SERIALNUMBER",
        "2.5.4.65" => "PSEUDONYM",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "EMAILADDRESS",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.1" => "UID",
        other => other,
    }
}

/// RFC 4514 escaping as RabbitMQ does it: a leading space or '#', a trailing space and
/// `"+,;<>\` get a backslash; control characters and every byte of a non-ASCII character
/// become `\XX` (upper-case hex of the UTF-8 bytes).
fn escape(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = String::with_capacity(value.len());
    for (i, &b) in bytes.iter().enumerate() {
        let first = i == 0;
        let last = i + 1 == bytes.len();
        match b {
            b' ' | b'#' if first => {
                out.push('\\');
                out.push(b as char);
            }
            b' ' if last => out.push_str("\\ "),
            b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\' => {
                out.push('\\');
                out.push(b as char);
            }
            b if !(32..126).contains(&b) => out.push_str(&format!("\\{b:02X}")),
            b => out.push(b as char),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert_with(dn: &[(DnType, &str)]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        for (t, v) in dn {
            name.push(t.clone(), *v);
        }
        params.distinguished_name = name;
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn distinguished_name_is_reversed_rfc4514() {
        let der = cert_with(&[
            (DnType::CountryName, "GB"),
            (DnType::OrganizationName, "Warren Tests"),
            (DnType::CommonName, "client-1"),
        ]);
        assert_eq!(
            login_name(&der, CertLoginFrom::DistinguishedName).as_deref(),
            Some("CN=client-1,O=Warren Tests,C=GB")
        );
        assert_eq!(
            login_name(&der, CertLoginFrom::CommonName).as_deref(),
            Some("client-1")
        );
    }

    #[test]
    fn special_characters_are_escaped_as_rabbitmq_does() {
        let der = cert_with(&[(DnType::CommonName, "#a, b+c\\ é ")]);
        assert_eq!(
            login_name(&der, CertLoginFrom::DistinguishedName).as_deref(),
            Some("CN=\\#a\\, b\\+c\\\\ \\C3\\A9\\ ")
        );
    }

    #[test]
    fn no_common_name_and_not_a_certificate() {
        let der = cert_with(&[(DnType::OrganizationName, "O")]);
        assert_eq!(login_name(&der, CertLoginFrom::CommonName), None);
        assert_eq!(
            login_name(b"\x30\x05garbage", CertLoginFrom::DistinguishedName),
            None
        );
        assert_eq!(login_name(&[], CertLoginFrom::DistinguishedName), None);
    }
}
