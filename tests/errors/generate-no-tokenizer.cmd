2 generate none.plan --prompt hello
