//! The jail's resolver at RESOLVER:53: it answers every query itself, so no query about a
//! name off the list ever leaves the host (no DNS tunnel). A listed name gets one A record,
//! the synthetic address brig maps back to the name; AAAA and other types get an empty
//! answer (clients fall back to A); any other name is NXDOMAIN.

use simple_dns::rdata::{A, RData};
use simple_dns::{
    CLASS, Name, OPCODE, Packet, PacketFlag, QCLASS, QTYPE, RCODE, ResourceRecord, TYPE,
};
use std::net::Ipv4Addr;

/// How long the jail may cache an answer; short, since the mapping lives as long as brig.
const TTL: u32 = 60;
const HEADER_LEN: usize = 12;

/// The reply to the jail's `query`, or None for something that is not a query at all (too
/// short for a header, or a response), which the caller drops. `decide(name)` gives the
/// synthetic address of a listed name (lowercase, no trailing dot), None for the others.
pub fn reply(query: &[u8], mut decide: impl FnMut(&str) -> Option<Ipv4Addr>) -> Option<Vec<u8>> {
    if query.len() < HEADER_LEN || query[2] & 0x80 != 0 {
        return None;
    }
    let id = u16::from_be_bytes([query[0], query[1]]);
    let recursion_desired = query[2] & 0x01 != 0;
    let opcode = (query[2] >> 3) & 0x0f;
    if opcode != OPCODE::StandardQuery as u8 {
        return error_reply(id, recursion_desired, RCODE::NotImplemented);
    }
    let Ok(packet) = Packet::parse(query) else {
        return error_reply(id, recursion_desired, RCODE::FormatError);
    };
    let [question] = packet.questions.as_slice() else {
        return error_reply(id, recursion_desired, RCODE::FormatError);
    };
    let name = question.qname.to_string().to_ascii_lowercase();
    let name = name.trim_end_matches('.');
    let mut answer = Packet::new_reply(id);
    flags(&mut answer, recursion_desired);
    answer.questions.push(question.clone());
    let in_class = matches!(question.qclass, QCLASS::CLASS(CLASS::IN) | QCLASS::ANY);
    let address = match question.qtype {
        // Reverse lookups of the synthetic addresses would only leak the mapping's order.
        QTYPE::TYPE(TYPE::PTR) => None,
        _ if !in_class => None,
        _ => decide(name),
    };
    match (address, question.qtype) {
        (None, _) => *answer.rcode_mut() = RCODE::NameError,
        (Some(address), QTYPE::TYPE(TYPE::A)) => answer.answers.push(ResourceRecord::new(
            question.qname.clone(),
            CLASS::IN,
            TTL,
            RData::A(A::from(address)),
        )),
        // The name exists, with no record of this type (NODATA).
        (Some(_), _) => {}
    }
    answer.build_bytes_vec().ok()
}

fn flags(packet: &mut Packet, recursion_desired: bool) {
    packet.set_flags(PacketFlag::RECURSION_AVAILABLE);
    if recursion_desired {
        packet.set_flags(PacketFlag::RECURSION_DESIRED);
    }
}

fn error_reply(id: u16, recursion_desired: bool, rcode: RCODE) -> Option<Vec<u8>> {
    let mut packet = Packet::new_reply(id);
    flags(&mut packet, recursion_desired);
    *packet.rcode_mut() = rcode;
    packet.build_bytes_vec().ok()
}

/// A query for `name` and `qtype` (used by the host-side resolver and the tests).
pub fn query(id: u16, name: &str, qtype: TYPE) -> Option<Vec<u8>> {
    let mut packet = Packet::new_query(id);
    packet.set_flags(PacketFlag::RECURSION_DESIRED);
    let name = Name::new(name).ok()?;
    packet.questions.push(simple_dns::Question::new(
        name,
        QTYPE::TYPE(qtype),
        QCLASS::CLASS(CLASS::IN),
        false,
    ));
    packet.build_bytes_vec().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str) -> Option<Ipv4Addr> {
        (name == "pypi.org").then_some(Ipv4Addr::new(198, 18, 0, 1))
    }

    fn ask(name: &str, qtype: TYPE) -> Vec<u8> {
        let query = query(0x1234, name, qtype).unwrap();
        reply(&query, listed).expect("a reply")
    }

    #[test]
    fn a_listed_name_gets_its_synthetic_address() {
        let bytes = ask("PyPI.org", TYPE::A);
        let answer = Packet::parse(&bytes).unwrap();
        assert_eq!(answer.id(), 0x1234);
        assert_eq!(answer.rcode(), RCODE::NoError);
        assert_eq!(answer.questions.len(), 1);
        let [record] = answer.answers.as_slice() else {
            panic!("one answer: {answer:?}");
        };
        assert_eq!(record.ttl, TTL);
        assert_eq!(
            record.rdata,
            RData::A(A::from(Ipv4Addr::new(198, 18, 0, 1)))
        );
    }

    #[test]
    fn other_types_of_a_listed_name_are_empty_and_others_do_not_exist() {
        let bytes = ask("pypi.org", TYPE::AAAA);
        let aaaa = Packet::parse(&bytes).unwrap();
        assert_eq!((aaaa.rcode(), aaaa.answers.len()), (RCODE::NoError, 0));
        for (name, qtype) in [
            ("example.com", TYPE::A),
            ("example.com", TYPE::AAAA),
            ("pypi.org", TYPE::PTR),
        ] {
            let bytes = ask(name, qtype);
            let answer = Packet::parse(&bytes).unwrap();
            assert_eq!(answer.rcode(), RCODE::NameError, "{name} {qtype:?}");
            assert!(answer.answers.is_empty());
        }
    }

    #[test]
    fn a_name_off_the_list_is_asked_of_decide_and_answered_nxdomain() {
        let mut asked = Vec::new();
        let query = query(7, "Secret.Exfil.Example.", TYPE::A).unwrap();
        let bytes = reply(&query, |name| {
            asked.push(name.to_string());
            None
        })
        .unwrap();
        assert_eq!(asked, ["secret.exfil.example"]);
        assert_eq!(Packet::parse(&bytes).unwrap().rcode(), RCODE::NameError);
    }

    #[test]
    fn malformed_queries_get_formerr_or_nothing_and_never_panic() {
        let good = query(9, "pypi.org", TYPE::A).unwrap();
        for cut in 0..good.len() {
            let answer = reply(&good[..cut], listed);
            if cut < HEADER_LEN {
                assert!(answer.is_none());
            } else {
                let packet = Packet::parse(answer.as_deref().unwrap()).unwrap();
                assert_eq!(
                    (packet.id(), packet.rcode()),
                    (9, RCODE::FormatError),
                    "cut {cut}"
                );
            }
        }
        let mut response = good.clone();
        response[2] |= 0x80;
        assert!(reply(&response, listed).is_none(), "responses are dropped");
        let mut update = good.clone();
        update[2] |= 5 << 3;
        let packet = reply(&update, listed).unwrap();
        assert_eq!(
            Packet::parse(&packet).unwrap().rcode(),
            RCODE::NotImplemented
        );
        let mut state = 0x9e3779b9u32;
        for _ in 0..2000 {
            let length = (state % 80) as usize;
            let bytes: Vec<u8> = (0..length)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                })
                .collect();
            let _ = reply(&bytes, listed);
        }
    }
}
