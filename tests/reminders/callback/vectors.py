"""Test vectors published with WeCom's (and Tencent's) sample code, copied as printed.

Only the constants are copied, never the code. Where a sample does not state what a
value decrypts to, the comment says so and says where the expected value comes from.

* ``QDG6EK_*``: the callback sample WeCom publishes for PHP (``callback/Sample.php`` in
  sbzhu/weworkapi_php; the same values in ``sample.go`` of sbzhu/weworkapi_golang and in
  ``testVerifyUrl`` of Tencent's Java ``WXBizMsgCryptTest``). The POST example's plaintext
  is stated in Sample.php's comment. The URL example's echostr plaintext is not printed
  by the samples (Tencent's Java test only asks that it "throws nothing"); the value
  below is the one independent implementations assert for it, and our decryption gives it.
* ``PY_*``: the sample WeCom publishes for Python (``callback/Sample.py`` in
  sbzhu/weworkapi_python), with other credentials. It prints neither plaintext: its POST
  example decrypts, byte for byte, to the reply text the same file encrypts in its third
  example (``sRespData``); its echostr decrypts to the number below (our decryption,
  committed as a known answer).
* ``MP_*``: Tencent's Java ``WXBizMsgCryptTest`` (package ``com.qq.weixin.mp.aes``, the
  same scheme for WeChat official accounts; a copy in stornado/spwechat,
  ``src/test/java/com/qq/weixin/mp/aes/WXBizMsgCryptTest.java``): encryption with a fixed
  16-byte random prefix, and the ciphertext it must give.
"""

from __future__ import annotations

# --- callback/Sample.php (sbzhu/weworkapi_php) -----------------------------------------
QDG6EK_TOKEN = "QDG6eK"
QDG6EK_ENCODING_AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
QDG6EK_CORP_ID = "wx5823bf96d3bd56c7"

# Example 1: the GET that verifies the callback URL.
QDG6EK_VERIFY_MSG_SIGNATURE = "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3"
QDG6EK_VERIFY_TIMESTAMP = "1409659589"
QDG6EK_VERIFY_NONCE = "263014780"
QDG6EK_VERIFY_ECHOSTR = (
    "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
)
QDG6EK_VERIFY_ECHO_PLAINTEXT = "1616140317555161061"

# Example 2: a POST WeCom sends, and its plaintext as the sample's comment gives it.
QDG6EK_POST_MSG_SIGNATURE = "477715d11cdb4164915debcba66cb864d751f3e6"
QDG6EK_POST_TIMESTAMP = "1409659813"
QDG6EK_POST_NONCE = "1372623149"
QDG6EK_POST_ENCRYPT = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3Qc"
    "zcdCUpj911L3vg3W/sYYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kz"
    "Js8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun"
    "1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V2t9EL4EhzJWrQUax5w"
    "LVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z"
    "1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)
QDG6EK_POST_BODY = (
    "<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]></ToUserName>"
    f"<Encrypt><![CDATA[{QDG6EK_POST_ENCRYPT}]]></Encrypt>"
    "<AgentID><![CDATA[218]]></AgentID></xml>"
)
QDG6EK_POST_PLAINTEXT = (
    "<xml><ToUserName><![CDATA[wx5823bf96d3bd56c7]]></ToUserName>\n"
    "<FromUserName><![CDATA[mycreate]]></FromUserName>\n"
    "<CreateTime>1409659813</CreateTime>\n"
    "<MsgType><![CDATA[text]]></MsgType>\n"
    "<Content><![CDATA[hello]]></Content>\n"
    "<MsgId>4561255354251345929</MsgId>\n"
    "<AgentID>218</AgentID>\n"
    "</xml>"
)

# --- callback/Sample.py (sbzhu/weworkapi_python) ---------------------------------------
PY_TOKEN = "hJqcu3uJ9Tn2gXPmxx2w9kkCkCE2EPYo"
PY_ENCODING_AES_KEY = "6qkdMrq68nTKduznJYO1A37W2oEgpkMUvkttRToqhUt"
PY_CORP_ID = "ww1436e0e65a779aee"

PY_VERIFY_MSG_SIGNATURE = "012bc692d0a58dd4b10f8dfe5c4ac00ae211ebeb"
PY_VERIFY_TIMESTAMP = "1476416373"
PY_VERIFY_NONCE = "47744683"
PY_VERIFY_ECHOSTR = (
    "fsi1xnbH4yQh0+PJxcOdhhK6TDXkjMyhEPA7xB2TGz6b+g7xyAbEkRxN/3cNXW9qdqjnoVzEtpbhnFyq6SVHyA=="
)
PY_VERIFY_ECHO_PLAINTEXT = "1288432023552776189"  # not printed by the sample: our known answer

PY_POST_MSG_SIGNATURE = "0c3914025cb4b4d68103f6bfc8db550f79dcf48e"
PY_POST_TIMESTAMP = "1476422779"
PY_POST_NONCE = "1597212914"
PY_POST_BODY = (
    "<xml><ToUserName><![CDATA[ww1436e0e65a779aee]]></ToUserName>\n"
    "<Encrypt><![CDATA[Kl7kjoSf6DMD1zh7rtrHjFaDapSCkaOnwu3bqLc5tAybhhMl9pFeK8NslNPVdMwmBQTNoW"
    "4mY7AIjeLvEl3NyeTkAgGzBhzTtRLNshw2AEew+kkYcD+Fq72Kt00fT0WnN87hGrW8SqGc+NcT3mu87Ha3dz1"
    "pSDi6GaUA6A0sqfde0VJPQbZ9U+3JWcoD4Z5jaU0y9GSh010wsHF8KZD24YhmZH4ch4Ka7ilEbjbfvhKkNL65H"
    "HL0J6EYJIZUC2pFrdkJ7MhmEbU2qARR4iQHE7wy24qy0cRX3Mfp6iELcDNfSsPGjUQVDGxQDCWjayJOpcwocu"
    "gux082f49HKYg84EpHSGXAyh+/oxwaWbvL6aSDPOYuPDGOCI8jmnKiypE+]]></Encrypt>\n"
    "<AgentID><![CDATA[1000002]]></AgentID>\n"
    "</xml>"
)
# The sample's sRespData (its third example), which its POST example decrypts to.
PY_POST_PLAINTEXT = (
    "<xml><ToUserName>ww1436e0e65a779aee</ToUserName><FromUserName>ChenJiaShun</FromUserName>"
    "<CreateTime>1476422779</CreateTime><MsgType>text</MsgType><Content>你好</Content>"
    "<MsgId>1456453720</MsgId><AgentID>1000002</AgentID></xml>"
)

# --- Tencent's Java WXBizMsgCryptTest (testAesEncrypt, testAesEncrypt2) ----------------
MP_TOKEN = "pamtest"
MP_ENCODING_AES_KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
MP_APP_ID = "wxb11529c136998cb6"
MP_RANDOM = b"aaaabbbbccccdddd"
MP_REPLY = "我是中文abcd123"
MP_REPLY_ENCRYPTED = (
    "jn1L23DB+6ELqJ+6bruv21Y6MD7KeIfP82D6gU39rmkgczbWwt5+3bnyg5K55bgVtVzd832WzZGMhkP72vVOfg=="
)
MP_REPLY2 = (
    "<xml><ToUserName><![CDATA[oia2Tj我是中文jewbmiOUlr6X-1crbLOvLw]]></ToUserName>"
    "<FromUserName><![CDATA[gh_7f083739789a]]></FromUserName>"
    "<CreateTime>1407743423</CreateTime><MsgType><![CDATA[video]]></MsgType>"
    "<Video><MediaId><![CDATA[eYJ1MbwPRJtOvIEabaxHs7TX2D-HV71s79GUxqdUkjm6Gs2Ed1KF3ulAOA9H1xG0]]>"
    "</MediaId><Title><![CDATA[testCallBackReplyVideo]]></Title>"
    "<Description><![CDATA[testCallBackReplyVideo]]></Description></Video></xml>"
)
MP_REPLY2_ENCRYPTED = (
    "jn1L23DB+6ELqJ+6bruv23M2GmYfkv0xBh2h+XTBOKVKcgDFHle6gqcZ1cZrk3e1qjPQ1F4RsLWzQRG9udbKWes"
    "xlkupqcEcW7ZQweImX9+wLMa0GaUzpkycA8+IamDBxn5loLgZpnS7fVAbExOkK5DYHBmv5tptA9tklE/fTIILH"
    "R8HLXa5nQvFb3tYPKAlHF3rtTeayNf0QuM+UW/wM9enGIDIJHF7CLHiDNAYxr+r+OrJCmPQyTy8cVWlu9iSvOH"
    "PT/77bZqJucQHQ04sq7KZI27OcqpQNSto2OdHCoTccjggX5Z9Mma0nMJBU+jLKJ38YB1fBIz+vBzsYjrTmFQ4"
    "4YfeEuZ+xRTQwr92vhA9OxchWVINGC50qE/6lmkwWTwGX9wtQpsJKhP+oS7rvTY8+VdzETdfakjkwQ5/Xka04"
    "2OlUb1/slTwo4RscuQ+RdxSGvDahxAJ6+EAjLt9d8igHngxIbf6YyqqROxuxqIeIch3CssH/LqRs+iAcILvApY"
    "ZckqmA7FNERspKA5f8GoJ9sv8xmGvZ9Yrf57cExWtnX8aCMMaBropU/1k+hKP5LVdzbWCG0hGwx/dQudYR/eXp"
    "3P0XxjlFiy+9DMlaFExWUZQDajPkdPrEeOwofJb"
)
