2 generate tests/fuzz/ckpt-plan --prompt hello
