# Packer 1.7 and later load builders as plugins: `packer init deploy/packer`
# installs the Azure one. Debian's packer (1.6) has azure-arm built in and
# does not know this block; TestPackerValidate validates bridgehead.pkr.hcl
# alone with it.
packer {
  required_plugins {
    azure = {
      source  = "github.com/hashicorp/azure"
      version = ">= 2.0.0"
    }
  }
}
