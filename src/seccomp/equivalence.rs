//! The dispatcher changes no answer: a classic-BPF interpreter runs seccompiler's programs
//! and the same programs with the dispatcher, for every shipped profile on both
//! architectures, over system call numbers, architectures and argument values, and
//! compares the actions. It also counts the instructions each run executes.

use super::dispatch::{BUCKET, add_dispatcher, optimize};
use seccompiler::{TargetArch, sock_filter};
use std::collections::{BTreeMap, BTreeSet};

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
    // Every number a call can have, and some that none has.
    let numbers = (0..=1023u32).chain([
        0x7fff_ffff,
        0x8000_0000,
        0xffff_ffff,
        0xffff_fffe,
        0x3fff_ffff,
    ]);
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
    for nr in (0..=1023u32).step_by(3).chain([16, 41, 56, 135, 512, 513]) {
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
fn the_dispatcher_changes_no_answer() {
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
                if filter == "allowlist" {
                    let optimized_too = add_dispatcher(original)
                        .unwrap_or_else(|why| panic!("{what}: no dispatcher: {why}"));
                    assert_eq!(optimized, optimized_too);
                    assert!(optimized.len() > original.len());
                } else {
                    // enosys: one call, nothing to gain.
                    assert!(add_dispatcher(original).is_err(), "{what}");
                    assert_eq!(&optimized, original);
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
        assert!(
            plain <= 24,
            "{what}: worst case without argument checks {plain}"
        );
        assert!(after <= 48, "{what}: worst case {after}");
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
    let why = add_dispatcher(program).expect_err(because);
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

#[test]
fn unexpected_shapes_are_left_alone() {
    let program = allowlist();
    assert!(add_dispatcher(&program).is_ok());

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

    // The arch check jumping past `ld nr`: the dispatcher would take its place.
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

/// A chain of `calls` blocks of seccompiler's shape, each allowing its call.
fn synthetic(calls: u32) -> Vec<sock_filter> {
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
        program.push(insn(0x05, 0, 0, 2));
        program.push(insn(0x06, 0, 0, RET_ALLOW));
        program.push(insn(0x06, 0, 0, RET_ERRNO_EPERM));
    }
    program.push(insn(0x06, 0, 0, RET_ERRNO_EPERM));
    program
}

#[test]
fn too_short_or_too_long_is_left_alone() {
    declined(&synthetic(BUCKET as u32), "a chain this short");
    // 800 calls fit in 4005 instructions, but not with a dispatcher.
    let long = synthetic(800);
    assert!(long.len() < 4096);
    declined(&long, "not below BPF_MAXINSNS");
    // 500 do, and every number gets the same answer.
    let program = synthetic(500);
    let optimized = add_dispatcher(&program).unwrap();
    assert_kernel_accepts(&optimized);
    let mut steps = Steps::default();
    compare(
        "synthetic",
        &program,
        &optimized,
        AUDIT_ARCH_X86_64,
        &[],
        &mut steps,
    );
    println!(
        "synthetic: worst {:?} -> {:?}",
        summary(&steps.before),
        summary(&steps.after)
    );
    assert!(summary(&steps.after).0 <= 24);
}
