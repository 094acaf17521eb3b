2 generate none.plan --bytes --prompt a --temperature hot
