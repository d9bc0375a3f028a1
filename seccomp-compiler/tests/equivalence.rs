//! The compact layout changes no answer: a classic-BPF interpreter runs seccompiler's
//! programs and their compact forms, for every shipped profile on both architectures, over
//! system call numbers (every one up to 1023, and both sides of every range boundary),
//! architectures and argument values, and compares the actions. It also counts the
//! instructions each run executes.

use brig_seccomp::dispatch::{compact, optimize};
use seccompiler::{TargetArch, sock_filter};
use std::collections::{BTreeMap, BTreeSet};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO_EPERM: u32 = 0x0005_0001;

/// `struct seccomp_data`: nr, arch, instruction_pointer, args[6].
#[derive(Clone, Copy, Debug)]
struct Data {
    nr: u32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}

impl Data {
    fn bytes(&self) -> [u8; 64] {
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&self.nr.to_ne_bytes());
        bytes[4..8].copy_from_slice(&self.arch.to_ne_bytes());
        bytes[8..16].copy_from_slice(&self.ip.to_ne_bytes());
        for (index, arg) in self.args.iter().enumerate() {
            let at = 16 + 8 * index;
            bytes[at..at + 8].copy_from_slice(&arg.to_ne_bytes());
        }
        bytes
    }
}

/// What one run of a program did.
#[derive(Clone, Copy, Debug)]
struct Run {
    action: u32,
    /// Instructions executed, the `ret` included.
    steps: usize,
    /// Whether it loaded an argument (or the instruction pointer).
    read_args: bool,
}

/// Runs a seccomp filter the way the kernel's classic-BPF interpreter does, for the
/// opcodes seccomp programs use; any other opcode fails the test.
fn run(program: &[sock_filter], data: &Data) -> Run {
    let bytes = data.bytes();
    let (mut a, mut pc, mut steps, mut read_args) = (0u32, 0usize, 0usize, false);
    loop {
        let insn = program
            .get(pc)
            .unwrap_or_else(|| panic!("pc {pc} left the program"));
        steps += 1;
        pc += 1;
        let k = insn.k;
        let branch = |taken: bool| if taken { insn.jt } else { insn.jf } as usize;
        match insn.code {
            // BPF_LD | BPF_W | BPF_ABS
            0x20 => {
                let at = k as usize;
                assert!(at.is_multiple_of(4) && at + 4 <= 64, "ld [{at}]");
                read_args |= at >= 8;
                a = u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
            }
            // BPF_ALU | BPF_AND | BPF_K
            0x54 => a &= k,
            // BPF_JMP | BPF_JA
            0x05 => pc += k as usize,
            // BPF_JMP | BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET (all BPF_K)
            0x15 => pc += branch(a == k),
            0x25 => pc += branch(a > k),
            0x35 => pc += branch(a >= k),
            0x45 => pc += branch(a & k != 0),
            // BPF_RET | BPF_K
            0x06 => {
                return Run {
                    action: k,
                    steps,
                    read_args,
                };
            }
            code => panic!("opcode {code:#06x} at {}: extend the interpreter", pc - 1),
        }
    }
}

/// What the kernel's checker (bpf_check_classic, seccomp_check_filter) demands.
fn assert_kernel_accepts(program: &[sock_filter]) {
    assert!(
        !program.is_empty() && program.len() <= 4096,
        "{} instructions",
        program.len()
    );
    for (index, insn) in program.iter().enumerate() {
        if insn.code & 0x07 == 0x05 {
            let targets = if insn.code == 0x05 {
                vec![index as u64 + 1 + u64::from(insn.k)]
            } else {
                vec![
                    index as u64 + 1 + u64::from(insn.jt),
                    index as u64 + 1 + u64::from(insn.jf),
                ]
            };
            for target in targets {
                assert!(target < program.len() as u64, "{index} jumps to {target}");
            }
        }
    }
    assert_eq!(
        program.last().unwrap().code,
        0x06,
        "the last instruction returns"
    );
}

/// A deterministic xorshift generator: the same values on every run.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn profile_text(arch: TargetArch, name: &str) -> &'static str {
    match (arch, name) {
        (TargetArch::x86_64, "default") => {
            include_str!("../../seccomp-profiles/x86_64/default.json")
        }
        (TargetArch::x86_64, "strict") => include_str!("../../seccomp-profiles/x86_64/strict.json"),
        (TargetArch::aarch64, "default") => {
            include_str!("../../seccomp-profiles/aarch64/default.json")
        }
        (TargetArch::aarch64, "strict") => {
            include_str!("../../seccomp-profiles/aarch64/strict.json")
        }
        _ => unreachable!(),
    }
}

const ARCHES: [(TargetArch, u32); 2] = [
    (TargetArch::x86_64, AUDIT_ARCH_X86_64),
    (TargetArch::aarch64, AUDIT_ARCH_AARCH64),
];

/// Argument vectors: all zeros, all ones, random ones, and the values the profile's own
/// argument rules compare with, exactly and off by one, alone and as whole rules.
fn argument_vectors(text: &str) -> Vec<[u64; 6]> {
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut rules: Vec<Vec<(usize, u64, Option<u64>)>> = Vec::new();
    for filter in value.as_object().unwrap().values() {
        for rule in filter["filter"].as_array().unwrap() {
            let Some(args) = rule.get("args").and_then(|args| args.as_array()) else {
                continue;
            };
            rules.push(
                args.iter()
                    .map(|arg| {
                        let mask = arg["op"].get("masked_eq").and_then(|mask| mask.as_u64());
                        (
                            arg["index"].as_u64().unwrap() as usize,
                            arg["val"].as_u64().unwrap(),
                            mask,
                        )
                    })
                    .collect(),
            );
        }
    }
    assert!(!rules.is_empty() || !text.contains("\"args\""));

    let mut values = BTreeSet::from([
        0,
        1,
        u64::MAX,
        0xffff_ffff,
        0x1_0000_0000,
        0x8000_0000,
        0x7fff_ffff,
    ]);
    for &(_, val, mask) in rules.iter().flatten() {
        for value in [val, val.wrapping_add(1), val.wrapping_sub(1), val | 1 << 32] {
            values.insert(value);
        }
        if let Some(mask) = mask {
            // Other bits set (still a match), one masked bit flipped (no match).
            values.insert(val | (!mask & 0xffff_ffff));
            values.insert(val ^ (mask & mask.wrapping_neg()));
            values.insert(mask);
        }
    }

    let mut vectors = vec![[0; 6], [u64::MAX; 6]];
    for &value in &values {
        vectors.push([value; 6]);
        for index in 0..6 {
            let mut args = [0; 6];
            args[index] = value;
            vectors.push(args);
        }
    }
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    for rule in &rules {
        let mut base = [0u64; 6];
        for &(index, val, _) in rule {
            base[index] = val;
        }
        vectors.push(base);
        for &(index, val, mask) in rule {
            let mut variants = vec![
                val.wrapping_add(1),
                val.wrapping_sub(1),
                val | 1 << 32,
                val ^ 1,
                random.next(),
            ];
            if let Some(mask) = mask {
                variants.push(val | (!mask & 0xffff_ffff));
                variants.push(val ^ (mask & mask.wrapping_neg()));
            }
            for variant in variants {
                let mut args = base;
                args[index] = variant;
                vectors.push(args);
            }
        }
        // The rule's values in otherwise random arguments.
        let mut args = [0u64; 6];
        args.iter_mut().for_each(|arg| *arg = random.next());
        for &(index, val, _) in rule {
            args[index] = val;
        }
        vectors.push(args);
    }
    for _ in 0..64 {
        let mut args = [0u64; 6];
        args.iter_mut().for_each(|arg| *arg = random.next());
        vectors.push(args);
        // Small values, which hit flags and families.
        args.iter_mut().for_each(|arg| *arg = random.next() % 32);
        vectors.push(args);
    }
    vectors
}

/// Instructions executed per call number (all arguments 0), before and after; `checked`
/// are the numbers whose answer depends on arguments (the kernel cannot cache them).
#[derive(Default)]
struct Steps {
    before: Vec<usize>,
    after: Vec<usize>,
    checked: Vec<bool>,
}

/// Compares `original` and `optimized` on every input; returns how many inputs it ran.
fn compare(
    what: &str,
    original: &[sock_filter],
    optimized: &[sock_filter],
    arch: u32,
    vectors: &[[u64; 6]],
    steps: &mut Steps,
) -> usize {
    let mut checked = 0;
    let mut check = |data: Data| {
        let before = run(original, &data);
        let after = run(optimized, &data);
        assert_eq!(
            before.action, after.action,
            "{what}: nr {:#x} arch {:#x} args {:x?}",
            data.nr, data.arch, data.args
        );
        checked += 1;
        (before, after)
    };
    let mut random = Random(0x2545_f491_4f6c_dd1d);
    let few = |random: &mut Random| {
        let mut args = [0u64; 6];
        args.iter_mut().for_each(|arg| *arg = random.next());
        [[0; 6], [u64::MAX; 6], args]
    };
    // Every number a call can have, some that none has, and both sides of every boundary.
    let edges = edges(&[original, optimized]);
    let numbers: BTreeSet<u32> = (0..=1023u32)
        .chain([
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0xffff_fffe,
            0x3fff_ffff,
        ])
        .chain(edges.iter().copied())
        .collect();
    for nr in numbers {
        let data = |args| Data {
            nr,
            arch,
            ip: 0x7f00_dead_beef,
            args,
        };
        let (before, after) = check(data([0; 6]));
        if nr <= 1023 {
            steps.before.push(before.steps);
            steps.after.push(after.steps);
            steps.checked.push(before.read_args);
        }
        let mut read_args = before.read_args || after.read_args;
        for args in few(&mut random) {
            let (before, after) = check(data(args));
            read_args |= before.read_args || after.read_args;
        }
        if read_args {
            for &args in vectors {
                check(data(args));
            }
        }
    }
    // x32 numbers (a sample), and the wrong architectures.
    let x32 = (0..=1023u32).step_by(3).chain([16, 41, 56, 135, 512, 513]);
    for nr in x32.chain(edges.iter().copied()) {
        for args in few(&mut random) {
            check(Data {
                nr: nr | X32_SYSCALL_BIT,
                arch,
                ip: 0,
                args,
            });
        }
    }
    for wrong in [
        AUDIT_ARCH_I386,
        AUDIT_ARCH_X86_64 ^ AUDIT_ARCH_AARCH64 ^ arch,
        0,
        u32::MAX,
    ] {
        for nr in (0..=1023u32).step_by(7) {
            let (before, _) = check(Data {
                nr,
                arch: wrong,
                ip: 0,
                args: [0; 6],
            });
            assert_eq!(before.action, RET_KILL_PROCESS, "{what}: the arch check");
        }
    }
    checked
}

/// Both sides of every comparison either program makes with the accumulator: for the
/// number, the first and last number of every range and the numbers just outside it.
fn edges(programs: &[&[sock_filter]]) -> BTreeSet<u32> {
    (programs.iter().flat_map(|program| program.iter()))
        // jeq, jgt, jge (BPF_K)
        .filter(|insn| matches!(insn.code, 0x15 | 0x25 | 0x35))
        .flat_map(|insn| [insn.k.wrapping_sub(1), insn.k, insn.k.wrapping_add(1)])
        .collect()
}

fn summary(steps: &[usize]) -> (usize, f64) {
    let max = steps.iter().copied().max().unwrap_or(0);
    (
        max,
        steps.iter().sum::<usize>() as f64 / steps.len().max(1) as f64,
    )
}

/// The worst case among the numbers whose answer does (or does not) depend on arguments.
fn worst(steps: &Steps, after: bool, checked: bool) -> usize {
    let values = if after { &steps.after } else { &steps.before };
    let picked: Vec<usize> = (values.iter().zip(&steps.checked))
        .filter(|(_, reads)| **reads == checked)
        .map(|(steps, _)| *steps)
        .collect();
    summary(&picked).0
}

#[test]
fn the_compact_layout_changes_no_answer() {
    let (mut report, mut worst_cases) = (Vec::new(), Vec::new());
    for (arch, audit) in ARCHES {
        for name in ["default", "strict"] {
            let text = profile_text(arch, name);
            let vectors = argument_vectors(text);
            let map = seccompiler::compile_from_json(text.as_bytes(), arch).unwrap();
            let map: BTreeMap<_, _> = map.into_iter().collect();
            for (filter, original) in &map {
                let what = format!("{arch:?} {name} {filter}");
                let optimized = optimize(original);
                let compacted =
                    compact(original).unwrap_or_else(|why| panic!("{what}: not compacted: {why}"));
                assert_eq!(optimized, compacted);
                // enosys, one call, gets shorter too; allowlists by far.
                assert!(optimized.len() < original.len(), "{what}");
                if filter == "allowlist" {
                    assert!(optimized.len() * 3 < original.len(), "{what}");
                }
                assert_kernel_accepts(original);
                assert_kernel_accepts(&optimized);
                let mut steps = Steps::default();
                let checked = compare(&what, original, &optimized, audit, &vectors, &mut steps);
                let (before_max, before_mean) = summary(&steps.before);
                let (after_max, after_mean) = summary(&steps.after);
                let (plain_before, plain_after) =
                    (worst(&steps, false, false), worst(&steps, true, false));
                let (args_before, args_after) =
                    (worst(&steps, false, true), worst(&steps, true, true));
                report.push(format!(
                    "{what:26} {:>4} -> {:>4} insns | executed per nr 0..=1023 (args 0): mean {before_mean:>5.1} -> {after_mean:>4.1}, \
                     worst {before_max:>3} -> {after_max:>2}; worst without argument checks {plain_before:>3} -> {plain_after:>2}, \
                     with {args_before:>3} -> {args_after:>2} | {checked} inputs, {} argument vectors",
                    original.len(),
                    optimized.len(),
                    vectors.len()
                ));
                if filter == "allowlist" {
                    worst_cases.push((what, before_max, after_max, plain_after));
                }
            }
        }
    }
    println!("{}", report.join("\n"));
    for (what, before, after, plain) in worst_cases {
        // The arch check, `ld nr`, a search of a few dozen leaves, the `ret`.
        assert!(
            plain <= 12,
            "{what}: worst case without argument checks {plain}"
        );
        // The same plus a body: socket's, all its rules failing.
        assert!(after <= 36, "{what}: worst case {after}");
        assert!(after * 5 < before, "{what}: worst case {before} -> {after}");
    }
}

/// The answers the tests of the interpreter itself rely on.
#[test]
fn the_interpreter_runs_the_allowlist() {
    let text = profile_text(TargetArch::x86_64, "default");
    let map = seccompiler::compile_from_json(text.as_bytes(), TargetArch::x86_64).unwrap();
    let program = &map["allowlist"];
    let call = |nr: u32, args: [u64; 6]| {
        run(
            program,
            &Data {
                nr,
                arch: AUDIT_ARCH_X86_64,
                ip: 0,
                args,
            },
        )
        .action
    };
    assert_eq!(call(0, [0; 6]), RET_ALLOW); // read
    assert_eq!(call(321, [0; 6]), RET_ERRNO_EPERM); // bpf
    assert_eq!(call(41, [2, 1, 0, 0, 0, 0]), RET_ALLOW); // socket(AF_INET, SOCK_STREAM)
    assert_eq!(call(41, [2, 3, 0, 0, 0, 0]), RET_ERRNO_EPERM); // SOCK_RAW
    assert_eq!(call(16, [0, 0x5412, 0, 0, 0, 0]), RET_ERRNO_EPERM); // ioctl(TIOCSTI)
    assert_eq!(call(16, [0, 0x5413, 0, 0, 0, 0]), RET_ALLOW);
    assert_eq!(call(X32_SYSCALL_BIT, [0; 6]), RET_ERRNO_EPERM);
}

// The fallback: whatever does not have seccompiler's shape is left alone.

fn allowlist() -> Vec<sock_filter> {
    let text = profile_text(TargetArch::x86_64, "default");
    let map = seccompiler::compile_from_json(text.as_bytes(), TargetArch::x86_64).unwrap();
    map["allowlist"].clone()
}

fn declined(program: &[sock_filter], because: &str) {
    let why = compact(program).expect_err(because);
    assert!(why.contains(because), "{why}");
    assert_eq!(optimize(program), program);
}

/// The header of the call with number `nr`.
fn header(program: &[sock_filter], nr: u32) -> usize {
    program
        .iter()
        .position(|insn| insn.code == 0x15 && insn.k == nr && insn.jt == 0 && insn.jf == 1)
        .unwrap()
}

/// What `program` answers for call `nr` with `args` on x86_64.
fn answer(program: &[sock_filter], nr: u32, args: [u64; 6]) -> u32 {
    let data = Data {
        nr,
        arch: AUDIT_ARCH_X86_64,
        ip: 0,
        args,
    };
    run(program, &data).action
}

#[test]
fn unexpected_shapes_are_left_alone() {
    let program = allowlist();
    assert!(compact(&program).is_ok());

    // A header whose jf skips elsewhere.
    let mut bent = program.clone();
    bent[header(&program, 2)].jf = 2;
    declined(&bent, "unexpected instruction");

    // A header without its two `ja`s.
    let mut bent = program.clone();
    bent[header(&program, 2) + 2].code = 0x06;
    declined(&bent, "two `ja`s");

    // Headers out of order.
    let mut bent = program.clone();
    let (first, second) = (header(&program, 1), header(&program, 2));
    bent[first].k = 2;
    bent[second].k = 1;
    declined(&bent, "not ascending");

    // The arch check jumping past `ld nr`, into what is replaced.
    let mut bent = program.clone();
    bent[1].jt = 2;
    declined(&bent, "past `ld nr`");

    // A jump out of the program.
    let mut bent = program.clone();
    bent[header(&program, 2) + 1].k = 5000;
    declined(&bent, "out of the program");

    // No `ld nr` at all: a filter without rules.
    let empty =
        r#"{"f": {"mismatch_action": "allow", "match_action": {"errno": 1}, "filter": []}}"#;
    let map = seccompiler::compile_from_json(empty.as_bytes(), TargetArch::x86_64).unwrap();
    declined(&map["f"], "no `ld nr`");
}

/// A jump out of a body, onto the chain's path for unmatched numbers (a later header, a skip
/// jump, the chain's end), answers the mismatch action while A still holds the number; once
/// the body has loaded an argument into A, only the chain's end does.
#[test]
fn jumps_out_of_a_body() {
    let program = allowlist();
    let ioctl = header(&program, 16);
    let end = program.len() - 1;
    let ja = |from: usize, to: usize| sock_filter {
        code: 0x05,
        jt: 0,
        jf: 0,
        k: (to - from - 1) as u32,
    };
    let vectors = argument_vectors(profile_text(TargetArch::x86_64, "default"));
    let same = |what: &str, bent: &[sock_filter]| {
        let compacted = compact(bent).unwrap_or_else(|why| panic!("{what}: {why}"));
        assert_kernel_accepts(&compacted);
        for program in [bent, &compacted] {
            assert_eq!(
                answer(program, 16, [0, 0x5413, 0, 0, 0, 0]),
                RET_ERRNO_EPERM
            );
            assert_eq!(answer(program, 17, [0; 6]), RET_ALLOW);
        }
        let mut steps = Steps::default();
        compare(
            what,
            bent,
            &compacted,
            AUDIT_ARCH_X86_64,
            &vectors,
            &mut steps,
        );
    };
    // ioctl's block: header, `ja 1` (its start), `ja 6`, `ld args[1]`, `jeq TIOCLINUX, 3, 0`,
    // `ld args[1]`, `jeq TIOCSTI, 1, 0`, `ret ALLOW`, `ret EPERM`.
    assert_eq!(
        (program[ioctl + 4].k, program[ioctl + 6].k),
        (0x541c, 0x5412)
    );
    for target in [header(&program, 17), header(&program, 18) + 2, end] {
        let mut bent = program.clone();
        bent[ioctl + 1] = ja(ioctl + 1, target);
        same(&format!("ioctl's start to {target}"), &bent);
    }
    // After the load, the allowing `ret` replaced by a jump out.
    let mut bent = program.clone();
    bent[ioctl + 7] = ja(ioctl + 7, end);
    same("ioctl's allow to the end", &bent);
    bent[ioctl + 7] = ja(ioctl + 7, header(&program, 18) + 2);
    declined(&bent, "with A no longer the number");
    // A body that jumps other than onto the path is left alone too, A changed or not: into
    // the next call's body (its `ja 1`)...
    bent[ioctl + 7] = ja(ioctl + 7, header(&program, 17) + 1);
    declined(&bent, "jumps out of its body");
    // (Only `ja`s from the start would make ioctl a plain call, allowed like pread64; so
    // its first load becomes a check of the number that jumps there only on paper.)
    let mut bent = program.clone();
    bent[ioctl + 3] = sock_filter {
        code: 0x15,
        jt: 0,
        jf: (header(&program, 17) + 1 - (ioctl + 4)) as u8,
        k: 16,
    };
    declined(&bent, "jumps out of its body");
    // ...or falling off its end.
    let mut bent = program.clone();
    bent[header(&program, 17) - 1] = sock_filter {
        code: 0x20,
        jt: 0,
        jf: 0,
        k: 0,
    };
    declined(&bent, "falls off its body");
}

/// A body is copied as it is, so a conditional jump out of it must reach the mismatch `ret`
/// in 8 bits; past other long bodies it cannot, and the program is left alone.
#[test]
fn long_bodies_keep_their_answers() {
    // `read` with 60 rules (300 instructions), then `write` with one.
    let rules: Vec<String> = (0..60)
        .map(|value| format!(r#"{{"syscall": "read", "args": [{{"index": 0, "type": "dword", "op": "eq", "val": {value}}}]}}"#))
        .collect();
    let text = format!(
        r#"{{"f": {{"mismatch_action": {{"errno": 1}}, "match_action": "allow", "filter": [{},
            {{"syscall": "write", "args": [{{"index": 0, "type": "dword", "op": "eq", "val": 1}}]}}]}}}}"#,
        rules.join(",")
    );
    let map = seccompiler::compile_from_json(text.as_bytes(), TargetArch::x86_64).unwrap();
    let program = &map["f"];
    // The search reaches the `ret`s past read's body through trampolines.
    let compacted = compact(program).unwrap();
    assert_kernel_accepts(&compacted);
    let mut steps = Steps::default();
    compare(
        "read with 60 rules",
        program,
        &compacted,
        AUDIT_ARCH_X86_64,
        &argument_vectors(&text),
        &mut steps,
    );
    for (nr, value, action) in [
        (0, 59, RET_ALLOW),
        (0, 60, RET_ERRNO_EPERM),
        (1, 1, RET_ALLOW),
    ] {
        assert_eq!(answer(&compacted, nr, [value, 0, 0, 0, 0, 0]), action);
    }

    // write's block, the last: header, `ja 1`, `ja 4`, `ld`, `jeq 1, 0, 1`, two `ret`s. Its
    // check bent to jump to the chain's end when it fails: the copy, placed before read's,
    // would have to jump past it.
    let write = program.len() - 8;
    assert_eq!(program[write].k, 1);
    let mut bent = program.clone();
    assert_eq!((bent[write + 4].code, bent[write + 4].jf), (0x15, 1));
    bent[write + 4].jf = 2;
    assert_eq!(write + 4 + 1 + 2, bent.len() - 1);
    declined(&bent, "out of reach");
}

/// A chain of `calls` blocks of seccompiler's shape for the even numbers, each allowing its
/// call; every `checked`th one (none for 0) only if argument 0 is 1.
fn synthetic(calls: u32, checked: u32) -> Vec<sock_filter> {
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut program = vec![
        insn(0x20, 0, 0, 4),
        insn(0x15, 1, 0, AUDIT_ARCH_X86_64),
        insn(0x06, 0, 0, RET_KILL_PROCESS),
        insn(0x20, 0, 0, 0),
    ];
    for nr in 0..calls {
        program.push(insn(0x15, 0, 1, nr * 2));
        program.push(insn(0x05, 0, 0, 1));
        if checked != 0 && nr % checked == 0 {
            program.push(insn(0x05, 0, 0, 4));
            program.push(insn(0x20, 0, 0, 16));
            program.push(insn(0x15, 0, 1, 1));
        } else {
            program.push(insn(0x05, 0, 0, 2));
        }
        program.push(insn(0x06, 0, 0, RET_ALLOW));
        program.push(insn(0x06, 0, 0, RET_ERRNO_EPERM));
    }
    program.push(insn(0x06, 0, 0, RET_ERRNO_EPERM));
    program
}

#[test]
fn long_and_short_chains_keep_their_answers() {
    // (calls, one in how many checked)
    let cases = [
        // 4005 instructions; the search alone is longer than jt and jf reach.
        (800, 0),
        (300, 3),
        (100, 1),
        (1, 0),
        (0, 0),
    ];
    for (calls, checked) in cases {
        let program = synthetic(calls, checked);
        assert!(program.len() < 4096);
        let compacted = compact(&program).unwrap();
        assert_kernel_accepts(&compacted);
        let mut steps = Steps::default();
        let what = format!("synthetic {calls}");
        let vectors = [[1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]];
        compare(
            &what,
            &program,
            &compacted,
            AUDIT_ARCH_X86_64,
            &vectors,
            &mut steps,
        );
        let jas = (compacted.iter())
            .filter(|insn| insn.code == 0x05 && insn.k > 0)
            .count();
        println!(
            "{what}: {} -> {} insns ({jas} `ja`s, bodies' included), worst {:?} -> {:?}",
            program.len(),
            compacted.len(),
            summary(&steps.before),
            summary(&steps.after)
        );
        assert!(summary(&steps.after).0 <= 24, "{what}");
        if calls == 800 {
            assert!(jas > 0, "no trampolines");
        }
    }
    // 500 calls with argument checks take 3505 instructions; the search and its trampolines
    // would add more than dropping the headers saves.
    let long = synthetic(500, 1);
    assert!(long.len() < 4096);
    declined(&long, "not below BPF_MAXINSNS");
}

/// The kernel takes the compact default allowlist and answers as the interpreter does: a
/// child installs it and makes calls it allows and denies, by number and by argument.
#[test]
fn the_kernel_runs_the_compact_allowlist() {
    let text = profile_text(ARCH, "default");
    let map = seccompiler::compile_from_json(text.as_bytes(), ARCH).unwrap();
    let program = compact(&map["allowlist"]).unwrap();
    let filter = libc::sock_fprog {
        len: program.len() as u16,
        // seccompiler's sock_filter is the kernel's struct.
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the child only makes raw system calls (no allocation, no lock) and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: as above; `filter` points into `program`, alive in this copy too.
        unsafe { libc::_exit(under_filter(&filter)) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "check {} failed",
        libc::WEXITSTATUS(status)
    );
}

/// Installs `filter` and makes calls with known answers; returns 0, or the failed check.
///
/// # Safety
/// To be run in a child forked from a multithreaded process: raw system calls only.
unsafe fn under_filter(filter: &libc::sock_fprog) -> i32 {
    // SAFETY: each call passes valid pointers or none.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return 100;
        }
        if libc::syscall(libc::SYS_seccomp, 1, 0, filter as *const _) != 0 {
            return 101;
        }
        let errno = || *libc::__errno_location();
        let denied = |result: libc::c_long| result == -1 && errno() == libc::EPERM;
        let checks: &[(bool, i32)] = &[
            (libc::syscall(libc::SYS_getpid) > 0, 1),
            (libc::syscall(libc::SYS_getppid) > 0, 2),
            (denied(libc::syscall(libc::SYS_bpf, 0, 0, 0)), 3),
            (denied(libc::syscall(libc::SYS_ptrace, 0, 0, 0, 0)), 4),
            (denied(libc::syscall(libc::SYS_unshare, 0)), 5),
            // A bad descriptor reaches the kernel: the filter let it through.
            (
                libc::ioctl(-1, libc::FIONREAD, 0) == -1 && errno() == libc::EBADF,
                6,
            ),
            (denied(libc::ioctl(-1, libc::TIOCSTI, 0) as libc::c_long), 7),
            (
                denied(libc::socket(libc::AF_INET, libc::SOCK_RAW, 1) as libc::c_long),
                8,
            ),
            (
                libc::close(libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)) == 0,
                9,
            ),
            (
                denied(libc::syscall(libc::SYS_personality, 0x0040_0000)),
                10,
            ),
            (
                libc::syscall(libc::SYS_personality, 0xffff_ffffu32) >= 0,
                11,
            ),
            // Beyond every call, and x32 numbers: the mismatch action, not ENOSYS.
            (denied(libc::syscall(1000)), 12),
            (denied(libc::syscall(0x7fff_ffff)), 13),
            #[cfg(target_arch = "x86_64")]
            (denied(libc::syscall(0x4000_0000 | libc::SYS_getpid)), 14),
        ];
        for &(passed, check) in checks {
            if !passed {
                return check;
            }
        }
        0
    }
}
